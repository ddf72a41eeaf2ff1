"""What ``ckptsel simulate`` simulates: the knobs of the model (:class:`TaskSim` per task,
:class:`SimSpec` for a study) and the two shipped settings, :data:`PRESETS` (``small``: quick,
with the ties and exclusions tests need; ``paper``: the paper's 81 trajectories in 26
configurations and its pool sizes). The model itself is :mod:`ckptsel.sim.simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

ANSWER_KINDS = ("numeric", "latex", "choice")

# Commonsense subtasks of the LLM-Adapters suite and the label each one's answers use.
COMMONSENSE_LABELS: dict[str, tuple[str, ...]] = {
    "boolq": ("true", "false"),
    "piqa": ("solution1", "solution2"),
    "social_i_qa": ("answer1", "answer2", "answer3"),
    "hellaswag": ("ending1", "ending2", "ending3", "ending4"),
    "winogrande": ("option1", "option2"),
    "ARC-Easy": ("answer1", "answer2", "answer3", "answer4"),
    "ARC-Challenge": ("answer1", "answer2", "answer3", "answer4"),
    "openbookqa": ("answer1", "answer2", "answer3", "answer4"),
}


@dataclass(frozen=True)
class TaskSim:
    """One task: its item pools, answer style, accuracy level and token lengths.

    ``seeds_per_configuration`` has one entry per configuration of the task, so the number of
    configurations and of trajectories per configuration are both explicit.
    """

    name: str
    kind: str  # "numeric" (GSM8K-like), "latex" (MATH-like) or "choice" (commonsense-like)
    seeds_per_configuration: tuple[int, ...]
    n_validation: int
    n_test: int
    variants_per_group: tuple[int, int] = (1, 1)  # inclusive range; (1, 1): group == item_id
    subtasks: tuple[str, ...] = ()  # test items split equally across these ("choice" only)
    n_distractors: int = 3  # shared wrong answers per item ("choice": the other labels)
    plateau_accuracy: float = 0.6  # mean plateau of the configurations' true test accuracy
    validation_shift: float = 0.0  # probit shift of validation items (>0: easier than test)
    empty_answer_rate: float = 0.05  # share of wrong answers with no extractable answer ("")
    response_tokens: float = 150.0  # median reference-response length
    response_sigma: float = 0.5  # lognormal sigma of that length
    prompt_tokens: float = 120.0  # median prompt length (template + question)
    prompt_sigma: float = 0.3
    per_token_loss: float = 0.4  # level of the teacher-forced NLL per token at its minimum
    empty_sequence_rate: float = 0.0  # validation items whose prompt fills the 512 window


@dataclass(frozen=True)
class SimSpec:
    """Every knob of the simulation; ``PRESETS`` holds the two shipped settings.

    Probabilities are fractions, ``*_pp`` values are percentage points of accuracy, ranges
    are inclusive ``(low, high)`` uniform ranges drawn per configuration.
    """

    tasks: tuple[TaskSim, ...]
    seeds: tuple[int, ...] = (42, 43, 44, 45)  # seed ids, used in order per configuration
    checkpoints: tuple[int, int] = (10, 31)  # range of T, drawn per configuration
    step_interval: int = 25
    offgrid_final_prob: float = 0.5  # chance the final step is not a multiple of the interval
    models: tuple[str, ...] = ("llama3-8b", "mistral-7b", "qwen2.5-7b", "gemma2-9b", "llama3.2-3b")
    adaptations: tuple[str, ...] = ("lora8", "full", "lora64")
    # true accuracy curves
    configuration_sd: float = 0.05  # sd of configuration plateaus around the task's level
    rise_pp: tuple[float, float] = (1.5, 6.0)  # early improvement still to come at step 0
    rise_tau: tuple[float, float] = (0.05, 0.25)  # its time constant, fraction of training
    decline_prob: float = 0.4  # share of configurations with a late decline
    decline_pp: tuple[float, float] = (0.5, 3.0)  # size of that decline by the final step
    decline_start: tuple[float, float] = (0.35, 0.75)
    gain_scale: float = 1.0  # planted effect: multiplies every configuration's late decline
    # averages of the last K checkpoints (recorded at step -K): their true accuracy is the mean
    # of those checkpoints' plus ``average_gain_pp`` (a planted averaging gain)
    average_last: tuple[int, ...] = ()
    average_gain_pp: float = 0.0
    seed_sd_pp: float = 0.8  # seed-level offset of the whole curve
    seed_decline_sd: float = 0.3  # lognormal sd of a seed's decline around its configuration's
    checkpoint_sd_pp: float = 0.65  # independent jitter of each checkpoint
    validation_mismatch: float = 0.02  # probit sd: validation curve vs test curve per checkpoint
    # item-level correlation (Gaussian copula); item_share + trajectory_item_share < 1
    item_share: float = 0.45  # variance share of the item difficulty (shared by the task)
    trajectory_item_share: float = 0.25  # variance share of the trajectory-item effect
    group_share: float = 0.6  # share of a validation item's effects common to its group
    ar_coefficient: float = 0.7  # AR(1) coefficient of the remaining part along checkpoints
    shared_answer_prob: float = 0.5  # chance an augmented variant keeps its group's answer
    # wrong answers
    distractor_concentration: float = 0.7  # Dirichlet alpha of the distractor weights
    wrong_item_share: float = 0.5  # variance share of the item-level "favourite wrong answer"
    wrong_ar: float = 0.8  # AR(1) coefficient of the wrong-answer latent
    # NLL
    nll_min_at: tuple[float, float] = (0.15, 0.4)  # fraction of training where NLL is lowest
    nll_early_excess: tuple[float, float] = (0.05, 0.2)  # relative excess at step 0
    nll_late_rise: tuple[float, float] = (0.05, 0.3)  # relative rise by the final step
    nll_tail_shift: tuple[float, float] = (0.0, 0.4)  # later minimum of truncated tail tokens
    nll_item_sigma: float = 0.5  # lognormal item heterogeneity of the per-token loss
    nll_noise_sigma: float = 0.05  # per-checkpoint lognormal noise of an item's loss
    nll_checkpoint_sd: float = 0.005  # relative jitter of the trajectory's loss per checkpoint
    nll_correctness_corr: float = 0.3  # corr of log-loss with the correctness latent
    tokenizer_spread: float = 0.1  # token counts scale by U(1 ± spread) per configuration
    # exclusions
    missing_rate: float = 0.0  # per (trajectory, validation item): one checkpoint's rows dropped


# A GSM8K-like task (numeric answers, MetaMathQA-style augmented validation variants).
GSM8K_TASK = TaskSim(
    name="gsm8k",
    kind="numeric",
    seeds_per_configuration=(3,),
    n_validation=1024,
    n_test=1319,
    variants_per_group=(1, 6),
    n_distractors=3,
    plateau_accuracy=0.62,
    validation_shift=0.15,
    empty_answer_rate=0.04,
    response_tokens=140.0,
    prompt_tokens=130.0,
    per_token_loss=0.35,
)


# A MATH-like task (LaTeX answers, long responses).
MATH_TASK = TaskSim(
    name="math",
    kind="latex",
    seeds_per_configuration=(3,),
    n_validation=512,
    n_test=500,
    variants_per_group=(1, 6),
    n_distractors=4,
    plateau_accuracy=0.30,
    validation_shift=0.1,
    empty_answer_rate=0.12,
    response_tokens=260.0,
    response_sigma=0.6,
    prompt_tokens=110.0,
    per_token_loss=0.55,
)


# The 8 commonsense subtasks of the LLM-Adapters suite as one task (label answers).
COMMONSENSE_TASK = TaskSim(
    name="commonsense",
    kind="choice",
    seeds_per_configuration=(3,),
    n_validation=305,
    n_test=4000,
    subtasks=tuple(COMMONSENSE_LABELS),
    plateau_accuracy=0.8,
    validation_shift=0.1,
    empty_answer_rate=0.02,
    response_tokens=8.0,
    response_sigma=0.15,
    prompt_tokens=110.0,
    prompt_sigma=0.5,
    per_token_loss=0.15,
)


PRESETS: dict[str, SimSpec] = {
    # Small: used by many tests. Few checkpoints and few distinct answers, so exact ties in
    # accuracy counts at budget 32 and plurality ties occur; exclusions are frequent enough.
    "small": SimSpec(
        tasks=(
            replace(
                GSM8K_TASK,
                seeds_per_configuration=(3, 2, 3),
                n_validation=150,
                n_test=200,
                variants_per_group=(1, 4),
                n_distractors=2,
                empty_answer_rate=0.05,
                empty_sequence_rate=0.02,
            ),
            replace(
                MATH_TASK,
                seeds_per_configuration=(3, 2),
                n_validation=100,
                n_test=80,
                variants_per_group=(1, 4),
                n_distractors=2,
                plateau_accuracy=0.32,
                empty_sequence_rate=0.02,
            ),
            replace(COMMONSENSE_TASK, seeds_per_configuration=(2, 3), n_validation=60, n_test=240),
        ),
        checkpoints=(5, 8),
        missing_rate=0.01,
    ),
    # Paper: 81 trajectories in 26 configurations, T 10..31, the paper's pool sizes.
    "paper": SimSpec(
        tasks=(
            replace(GSM8K_TASK, seeds_per_configuration=(3,) * 8 + (4, 4), empty_sequence_rate=0.0),
            replace(MATH_TASK, seeds_per_configuration=(3,) * 7 + (4,), empty_sequence_rate=0.002),
            replace(COMMONSENSE_TASK, seeds_per_configuration=(3,) * 8, n_validation=305, n_test=4000),
        ),
        checkpoints=(10, 31),
        missing_rate=0.0002,
    ),
}
