from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# loaded before anything loads numpy: it pins numpy's BLAS kernels (ckptsel._util.blas), so the
# pinned summary hashes hold on every CPU (tests/project/test_blas.py checks this session's kernel)
import ckptsel  # noqa: F401

from s3local import s3, s3_endpoint  # noqa: F401  (fixtures: a local S3 server, a bucket per test)

# trackio reads TRACKIO_DIR once, at its first import, wherever in the session that happens (a
# tracker test, a CLI run, a module that imports every tracker; under pytest-xdist the modules a
# worker runs first differ): each test process stores in one folder of its own from the start,
# never in ~/.cache, and tests/offline_trackers.py points the trackers' tests there too
_TRACKIO = tempfile.mkdtemp(prefix="ckptsel-tests-trackio-")
atexit.register(shutil.rmtree, _TRACKIO, True)
os.environ["TRACKIO_DIR"] = os.environ["CKPTSEL_TEST_TRACKIO_DIR"] = _TRACKIO

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _conformance_cache(tmp_path_factory):
    """ckptsel's caches (conformance verdicts, the node cache) in a folder of this session, not
    the user's ~/.cache: no verdict of a run outside the tests is read or written."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CKPTSEL_CACHE_DIR", str(tmp_path_factory.mktemp("ckptsel-cache")))
    mp.setenv("CKPTSEL_KEY_FILE", str(tmp_path_factory.mktemp("ckptsel-key") / "key"))  # the caches' HMAC key
    yield
    mp.undo()


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module's tiny models: tiny matrices run far faster on one
    thread than on two on a shared, busy 2-core machine. Modules that run tiny models say
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data files shipped beside the repo (../shared/data); skip where absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (expected ../shared/data beside the repo)")
    return SHARED_DATA
