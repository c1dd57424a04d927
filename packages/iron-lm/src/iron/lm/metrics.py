"""What a run of the model costs: load time, time to first token, decode
speed and resident memory, as every model app reports them.

Resident memory comes from /proc/self/status: VmHWM (the peak since the
process started) and VmRSS (now). Where there is no /proc they are None.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

_STATUS = Path("/proc/self/status")


def resident_bytes() -> tuple[int | None, int | None]:
    """(peak, current) resident set size of this process in bytes: VmHWM and
    VmRSS, or (None, None) without /proc."""
    try:
        status = _STATUS.read_text()
    except OSError:
        return None, None
    found = dict(re.findall(r"^(VmHWM|VmRSS):\s+(\d+) kB", status, re.M))
    peak, now = found.get("VmHWM"), found.get("VmRSS")
    return (None if peak is None else int(peak) * 1024, None if now is None else int(now) * 1024)


@dataclass(frozen=True)
class Metrics:
    """A snapshot. `ttft_seconds` is the last prefill (the first token);
    `decode_seconds` the decode steps since it, whose mean gives
    `decode_tokens_per_second`. RSS figures are read when the snapshot is
    taken: peak is the process's high-water mark (it includes the upload),
    steady what is resident now."""

    backend: str
    designs: str  # how many steps ran designs on the device, which fell back
    load_seconds: float | None
    ttft_seconds: float | None
    decode_seconds: tuple[float, ...]
    peak_rss_bytes: int | None
    steady_rss_bytes: int | None

    @property
    def decode_tokens_per_second(self) -> float | None:
        if not self.decode_seconds:
            return None
        return 1.0 / statistics.fmean(self.decode_seconds)

    def rows(self) -> list[tuple[str, str]]:
        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f} s"

        def mib(value: int | None) -> str:
            return "n/a" if value is None else f"{value / 2**20:,.0f} MiB"

        speed = self.decode_tokens_per_second
        steps = len(self.decode_seconds)
        return [
            ("backend", self.backend),
            ("device steps", self.designs),
            ("load (read, compile, upload)", seconds(self.load_seconds)),
            ("time to first token", seconds(self.ttft_seconds)),
            (
                "decode",
                "-"
                if speed is None
                else f"{speed:.1f} tokens/s ({1e3 / speed:.1f} ms/token over {steps} steps)",
            ),
            ("peak RSS (VmHWM)", mib(self.peak_rss_bytes)),
            ("steady RSS (VmRSS)", mib(self.steady_rss_bytes)),
        ]

    def table(self) -> str:
        """The figures as a two-column text table."""
        rows = self.rows()
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
