"""A deadline for tests of inputs that could hang a loader: fail instead of waiting forever."""
import signal
from contextlib import contextmanager


@contextmanager
def deadline(seconds):
    """Fail instead of hanging: SIGALRM raises TimeoutError after `seconds` (main thread only)."""
    def alarm(signum, frame):
        raise TimeoutError(f"still running after {seconds} s (a hang)")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
