"""``ckptsel watch``: measure a run while it trains, each checkpoint once it is complete, with a
live status (terminal and ``status.json``) and ``selection.json`` kept up to date."""

from __future__ import annotations

import sys
from typing import Any

import typer

from ckptsel import defaults
from ckptsel._util.extras import require_ml
from ckptsel._util.keys import user_key
from ckptsel.cli import options
from ckptsel.cli.output import console, err_console, json_flag, print_json, progress_bars
from ckptsel.records.schema import candidate_name


@options.with_groups
def watch(
    run: dict[str, Any] = options.run_options(
        run_dir="Run folder or URL (s3://, gs://, file://) that gets checkpoint-<step>/ folders.",
        out="Records folder or URL (status.json and selection.json go there too).",
    ),
    until_step: int = typer.Option(None, "--until-step", help="Final step (default: the marker's max_steps / should_training_stop)."),
    poll: float = typer.Option(10.0, "--poll", help="Seconds between listings of the run."),
    settle: float = typer.Option(20.0, "--settle", help="Seconds a folder must stay unchanged before it is measured."),
    marker: str = typer.Option("trainer_state.json", "--marker", help="File the trainer writes last ('none': no marker)."),
    layout: str = typer.Option(
        "hf", "--layout", help="hf (checkpoint-<n>: Trainer, TRL, axolotl, LLaMA-Factory) or torchtune (epoch_<n>, step_<n>)."
    ),
    timeout: float = typer.Option(None, "--timeout", help="Stop after this many seconds without finishing (exit 1)."),
    status_file: str = typer.Option(
        None, "--status-file", help="Also keep the status here (default: <out>/watch/<trajectory>/status.json)."
    ),
    select: bool = typer.Option(True, "--select/--no-select", help="Keep selection.json up to date after each checkpoint."),
    rule: str = typer.Option("accuracy", "--rule", help="Rule of the selection: accuracy, agreement or nll."),
    draws: int = typer.Option(defaults.SELECT_DRAWS, "--draws", help="Selection: bootstrap draws."),
    engine: dict[str, Any] = options.ENGINE,
    vllm_and_mixing: dict[str, Any] = options.VLLM_AND_MIXING,
    progress: bool = options.PROGRESS,
    as_json: bool = json_flag(
        "At the end, print one JSON object (status.json's and selection.json's objects, where they are); the status lines go to stderr."
    ),
) -> None:
    """Watch RUN_DIR while a trainer writes it and measure each checkpoint into OUT as soon as
    it is complete; ends once the final checkpoint is recorded. Run it again to continue."""
    user_key()  # the key of the caches (verdicts, packs), checked before status.json is written
    require_ml("ckptsel watch")
    # the measurement stage loads when the command runs (see ckptsel.cli)
    from ckptsel.measure.watch import WatchSettings, status_path
    from ckptsel.workflows.advise.selection import SelectSettings
    from ckptsel.workflows.watching import describe, selection_path, watch_and_select

    run_dir, config, where = options.measure_inputs(run, engine, vllm_and_mixing)
    settings = WatchSettings(
        poll=poll, settle=settle, until_step=until_step, layout=layout, timeout=timeout, marker=None if marker.lower() == "none" else marker
    )
    select_settings = SelectSettings(draws=draws)
    say = _Say(err_console if as_json else console)  # with --json, stdout is the JSON alone
    # the bars draw on stdout: not with --json
    with progress_bars(progress and not as_json and sys.stderr.isatty()) as on_progress:
        status = watch_and_select(
            run_dir,
            config,
            **where,
            settings=settings,
            rule=rule,
            select_settings=select_settings,
            selection=select,
            status_file=status_file,
            on_status=_StatusLines(describe, say),
            on_progress=on_progress,
            on_selection=say.selected,
        )
    out = where["out"]
    selection_at = selection_path(out, status.trajectory)
    if as_json:
        print_json(
            "watch",
            {
                "trajectory": status.trajectory,
                "done": status.state == "done",
                "status": status.to_dict(),
                "status_file": str(status_file or status_path(out, status.trajectory)),
                "selection": say.selection if select else None,
                "selection_file": str(selection_at) if select else None,
            },
        )
    if status.state != "done":
        say.console.print(f"watch: stopped after {timeout:g} s without the final checkpoint; run it again to continue")
        raise typer.Exit(1)
    incomplete = f"; never complete: {sorted(status.incomplete)}" if status.incomplete else ""
    say.console.print(
        f"watch: {status.trajectory}: done at step {status.final_step}, "
        f"{len(status.recorded)} checkpoints recorded in {out}{incomplete}" + (f"; selection in {selection_at}" if select else ""),
        soft_wrap=True,
        highlight=False,
    )
    if status.engines:  # "vllm engine started once (...), 9 checkpoints swapped ..."
        say.console.print(f"  {status.engines}", soft_wrap=True, highlight=False)


class _Say:
    """The watcher's lines on ``console``, and the last selection written."""

    def __init__(self, console) -> None:
        self.console, self.selection = console, None

    def __call__(self, line: str) -> None:
        self.console.print(f"watch: {line}", soft_wrap=True, highlight=False)

    def selected(self, data: dict) -> None:
        self.selection = data
        if data["state"] == "selected":
            rec = data["recommendation"]
            what = "selection (provisional: run in progress)" if rec.get("provisional") else "selection"
            self(f"{what}: keep {candidate_name(rec['keep_step'])} ({rec['reason']})")


class _StatusLines:
    """The live status: a line whenever the watcher's state changes (a poll alone is not news)."""

    def __init__(self, describe, say: _Say) -> None:
        self.describe, self.say, self.last = describe, say, ""

    def __call__(self, status) -> None:
        line = self.describe(status)
        if line != self.last:
            self.last = line
            self.say(line)
