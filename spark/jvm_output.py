"""The JVM's stderr while Spark starts it: the noise lines nobody acts on filtered out, and
what a JVM that fails to start prints held back for cqopt's one error line.

:func:`cqopt.spark.session.spark_session` (the one place Spark is started and configured)
starts the JVM inside :func:`jvm_stderr_filtered`; :func:`stderr_copy` gives the lines
cqopt prints meanwhile a stderr of their own.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

# Lines the JVM prints to stderr past any log configuration, so filtered out: the module
# system's notice for the launcher's --add-modules=jdk.incubator.vector (hard-coded in
# its JavaModuleOptions; no JVM option silences it), and the notice Spark prints with
# System.err when it sets a PySpark driver's shell log level.
_JVM_NOISE = (b"WARNING: Using incubator modules", b"Setting default log level to",
              b"To adjust logging level use sc.setLogLevel")


class JvmStart:
    """The JVM's stderr while it starts: held back until it has started, then passed on.

    A JVM that cannot start (an invalid heap size, too little memory) prints
    its reasons and a "Could not create the Java Virtual Machine" on its
    stderr; held back, they become part of cqopt's one error line instead.
    """

    def __init__(self, real: int | None = None):
        self.real, self.lock = real, threading.Lock()
        self.held: list[bytes] | None = []  # None once started: lines pass straight on
        self.copier: threading.Thread | None = None
        self.restored = False  # this process's stderr is its own again

    def line(self, line: bytes) -> None:
        if line.startswith(_JVM_NOISE) or not line.strip():
            return
        with self.lock:
            if self.held is not None:
                self.held.append(line)
                return
        with contextlib.suppress(OSError):
            os.write(self.real, line + b"\n")

    def started(self) -> None:
        """The JVM runs: what it printed so far, and all it prints later, goes to stderr."""
        with self.lock:
            held, self.held = self.held or [], None
        for line in held:
            with contextlib.suppress(OSError):
                os.write(self.real, line + b"\n")

    def failed(self, wait: float = 5.0) -> list[str]:
        """What the JVM printed before it failed to start (its stderr is closed first)."""
        if self.copier is not None and not self.restored:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(self.real, 2)  # our end of the pipe: once the JVM is gone, it ends
            self.restored = True
            self.copier.join(wait)
        with self.lock:
            held, self.held = self.held or [], None
        return [line.decode("utf-8", "replace").strip() for line in held]


@contextlib.contextmanager
def stderr_copy() -> Iterator[Any]:
    """A text stream on a duplicate of this process's stderr as it is now (sys.stderr itself
    where it has no file descriptor, as under pytest's capture)."""
    try:
        sys.stderr.flush()
        fd = os.dup(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        yield sys.stderr
        return
    stream = os.fdopen(fd, "w", buffering=1, encoding="utf-8", errors="replace")
    try:
        yield stream
    finally:
        with contextlib.suppress(OSError, ValueError):
            stream.close()


@contextlib.contextmanager
def jvm_stderr_filtered() -> Iterator[JvmStart]:
    """Start the JVM (in the block) with its stderr through a filter of :data:`_JVM_NOISE`.

    The JVM inherits a pipe as its stderr for its whole life; a daemon thread
    copies the pipe to the real stderr without the noise lines, holding them
    back until the block calls ``started()`` (see :class:`JvmStart`). This
    process's own stderr is restored when the block ends.
    """
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # the JVM runs already (spark-submit)
        yield JvmStart()
        return
    try:
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        real = os.dup(2)
    except (OSError, ValueError):
        yield JvmStart()
        return
    start = JvmStart(real)
    os.dup2(write_end, 2)
    os.close(write_end)
    start.copier = threading.Thread(target=_copy_without_noise, args=(read_end, start),
                                    daemon=True, name="cqopt-jvm-stderr")
    start.copier.start()
    try:
        yield start
    finally:
        if not start.restored:  # (failed() restored it, and the thread may have closed real)
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(real, 2)  # the JVM keeps the pipe; the thread ends when the JVM does


def _copy_without_noise(read_end: int, start: JvmStart) -> None:
    with open(read_end, "rb", buffering=0) as pipe:
        pending = b""
        while chunk := pipe.read(65536):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                start.line(line)
        if pending:
            start.line(pending)
    with contextlib.suppress(OSError):
        os.close(start.real)
