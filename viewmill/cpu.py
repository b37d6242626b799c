"""What this CPU can do, read from its feature flags (never from its vendor).

Code paths are chosen by the features a CPU reports: machines vary (AVX2 only; AVX-512 with
VNNI and BF16; AMD parts with AVX-512 that some libraries skip because they check the vendor).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

log = logging.getLogger("viewmill.cpu")

# CTranslate2's AVX512 kernels need these (its own check, minus the vendor test it adds).
AVX512_FLAGS = frozenset({"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"})
CT2_ISA_ENV = "CT2_FORCE_CPU_ISA"
# Native bf16 arithmetic (AVX-512 BF16 dot products, AMX tiles): where bf16 autocast can pay on CPU.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# What training's precision `auto` means, pinned (fp32 or bf16): the same figures on every machine.
AUTO_PRECISION_ENV = "VIEWMILL_AUTO_PRECISION"


def cpu_cores() -> int:
    """The cores this process may run on (affinity and container limits), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else max(1, os.cpu_count() or 1)


@cache
def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's feature flags (empty where /proc/cpuinfo is not there)."""
    try:
        text = cpuinfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, ARM
            return frozenset(value.split())
    return frozenset()


def flags_label(flags: frozenset[str] | None = None) -> str:
    """The flags that decide speed here, for benchmark headers ("avx2 avx512f ... amx_bf16")."""
    flags = cpu_flags() if flags is None else flags
    wanted = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16",
              "amx_int8", "neon", "asimd")  # fmt: skip
    return " ".join(flag for flag in wanted if flag in flags) or "no SIMD flags read"


def cpu_has_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether the CPU computes in bf16 natively (avx512_bf16 or amx_bf16), whatever its vendor."""
    return bool((cpu_flags() if flags is None else flags) & BF16_FLAGS)


def auto_precision(device: str, flags: frozenset[str] | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """Training's autocast precision where a recipe leaves it at `auto`: bf16 on a CPU that
    computes in bf16 natively (a step of the demo's training 2.4x faster, the same STS-B dev:
    BENCHMARKS.md), fp32 elsewhere (GPUs included: at 32 pairs a step bf16 was slower there).
    VIEWMILL_AUTO_PRECISION pins it."""
    pinned = environ.get(AUTO_PRECISION_ENV)
    if pinned:
        if pinned not in ("fp32", "bf16"):
            raise ValueError(f"{AUTO_PRECISION_ENV}={pinned}: set it to fp32 or bf16, or unset it")
        return pinned
    return "bf16" if device.split(":")[0] == "cpu" and cpu_has_bf16(flags) else "fp32"


@dataclass(frozen=True)
class IsaChoice:
    isa: str | None  # what CTranslate2 is told; None: its own default
    reason: str


def choose_ct2_isa(flags: frozenset[str], environ: Mapping[str, str]) -> IsaChoice:
    """The CTranslate2 CPU code path: a user's own CT2_FORCE_CPU_ISA wins; else AVX512 wherever
    the flags have it (CTranslate2 itself picks AVX2 on non-Intel CPUs with AVX-512)."""
    own = environ.get(CT2_ISA_ENV)
    if own:
        return IsaChoice(own, f"{CT2_ISA_ENV}={own} set by the user")
    if flags >= AVX512_FLAGS:
        return IsaChoice("AVX512", "the CPU reports " + " ".join(sorted(AVX512_FLAGS)))
    return IsaChoice(None, "no AVX-512: CTranslate2's own choice (AVX2 where the CPU has it)")


@cache
def apply_ct2_isa() -> IsaChoice:
    """Tell CTranslate2 its code path before it first reads the setting (once per process:
    it reads the variable when it first decodes). Logged, so a run says which path it took."""
    choice = choose_ct2_isa(cpu_flags(), os.environ)
    if choice.isa and CT2_ISA_ENV not in os.environ:
        os.environ[CT2_ISA_ENV] = choice.isa
    log.info("CTranslate2 CPU code path: %s (%s)", choice.isa or "default", choice.reason)
    return choice
