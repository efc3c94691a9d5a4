"""Progress of long commands: a bar redrawn in place on a terminal, plain lines
otherwise (a pipe, a log file, a CI job), nothing at all for ``-o json``."""

import shutil
import time

import click


def duration(seconds):
    """``45s``, ``2m13s``, ``1h05m``: a time left, as a person reads it."""
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def bar(fraction, width):
    filled = round(width * min(max(fraction, 0.0), 1.0))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


class Progress:
    """``done`` of ``total`` things (machines registered, ...), with the time
    left estimated from the rate so far."""

    def __init__(self, total, noun, stream=None, tty=None, quiet=False):
        self.total = total
        self.noun = noun
        self.stream = stream or click.get_text_stream("stdout")
        self.tty = self.stream.isatty() if tty is None else tty
        self.quiet = quiet
        self._started = time.monotonic()
        self._drawn = False

    def text(self, done):
        text = f"{done}/{self.total} {self.noun}"
        elapsed = time.monotonic() - self._started
        if 0 < done < self.total and elapsed > 0:
            text += f", ETA {duration(elapsed / done * (self.total - done))}"
        return text

    def update(self, done):
        if self.quiet:
            return
        fraction = done / self.total if self.total else 1.0
        if self.tty:
            columns = shutil.get_terminal_size((80, 20)).columns
            info = f"{round(100 * fraction):>3}%  {self.text(done)}"
            line = f"{bar(fraction, max(10, min(40, columns - 4 - len(info))))} {info}"
            self.stream.write("\r\x1b[2K" + line[:max(columns - 1, 20)])
            self._drawn = True
        else:
            self.stream.write(f"{time.strftime('%H:%M:%S')} {self.text(done)}\n")
        self.stream.flush()

    def finish(self):
        """End the bar's line, so that what follows starts on its own."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
