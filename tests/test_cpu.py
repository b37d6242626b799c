"""CPU features read from the flags, and CTranslate2's code path chosen by them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, SENTENCES
from tests.tiny_mt import build_tiny_marian
from viewmill.cpu import AVX512_FLAGS, auto_precision, choose_ct2_isa, cpu_flags, cpu_has_bf16, flags_label

AVX2_ONLY = frozenset({"sse4_1", "avx", "avx2", "fma"})


def test_flags_are_read_from_cpuinfo_and_labelled(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f avx512_vnni\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n")  # fmt: skip
    flags = cpu_flags.__wrapped__(info)
    assert flags == {"fpu", "avx2", "avx512f", "avx512_vnni"}
    assert flags_label(flags) == "avx2 avx512f avx512_vnni"
    assert cpu_flags.__wrapped__(tmp_path / "absent") == frozenset()


@pytest.mark.parametrize(
    ("line", "bf16"),
    [
        ("flags\t\t: fpu avx2 avx512f avx512bw avx512_vnni", False),  # AVX-512 without its BF16 extension
        ("flags\t\t: fpu avx2 avx512f avx512_bf16", True),  # Cooper Lake, AMD Zen 4 and later
        ("flags\t\t: fpu avx2 amx_tile amx_bf16", True),
        ("flags\t\t: fpu sse4_2 avx2 fma", False),
        ("Features\t: fp asimd bf16", False),  # ARM's bf16 is not measured here: float32 stays
    ],
)
def test_bf16_support_is_read_from_the_flags_whatever_the_vendor(tmp_path, line, bf16):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\n{line}\n")
    assert cpu_has_bf16(cpu_flags.__wrapped__(info)) is bf16
    assert cpu_has_bf16(cpu_flags.__wrapped__(tmp_path / "absent")) is False


@pytest.mark.parametrize(
    ("flags", "environ", "isa"),
    [
        (AVX2_ONLY | AVX512_FLAGS, {}, "AVX512"),  # whatever the vendor: AMD EPYC parts included
        (AVX2_ONLY | AVX512_FLAGS - {"avx512bw"}, {}, None),  # a partial AVX-512 is not enough
        (AVX2_ONLY, {}, None),
        (AVX2_ONLY | AVX512_FLAGS, {"CT2_FORCE_CPU_ISA": "AVX2"}, "AVX2"),  # the user's own choice wins
    ],
)
def test_the_ct2_code_path_follows_the_flags_and_a_user_setting_wins(flags, environ, isa):
    choice = choose_ct2_isa(frozenset(flags), environ)
    assert choice.isa == isa
    assert choice.reason


PROBE = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from viewmill.augment.engines import DecodingSpec
from viewmill.augment.ctranslate2_engine import CT2Engine
engine = CT2Engine(sys.argv[1], "en", "de", compute_type="int8")
print(json.dumps(engine.translate(json.loads(sys.argv[2]), "en", "de", DecodingSpec(beam_size=4))))
"""


def _translate(model, env: dict[str, str]) -> tuple[list, str]:
    done = subprocess.run([sys.executable, "-c", PROBE, str(model), json.dumps(SENTENCES)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout), done.stderr


def test_the_chosen_code_path_agrees_with_the_avx2_path_and_is_logged(tmp_path):
    if not cpu_flags() >= AVX512_FLAGS:
        pytest.skip(f"this CPU has no AVX-512 (flags: {flags_label()}): only the AVX2 path exists here")
    model = build_tiny_marian(tmp_path / "marian", SENTENCES * 3)
    env = {k: v for k, v in os.environ.items() if k != "CT2_FORCE_CPU_ISA"} | {"XDG_CACHE_HOME": str(tmp_path)}
    chosen, log = _translate(model, env)
    assert "CTranslate2 CPU code path: AVX512 (the CPU reports avx512bw" in log
    avx2, log = _translate(model, env | {"CT2_FORCE_CPU_ISA": "AVX2"})
    assert "CTranslate2 CPU code path: AVX2 (CT2_FORCE_CPU_ISA=AVX2 set by the user)" in log
    # int8 products differ by ISA (AVX2's u8s8 pairs saturate at 16 bits, VNNI's do not), so a
    # random model's near-tied beams may break differently (1 of 20 on an AMD EPYC with VNNI);
    # a broken path would disagree on most.
    same = sum(a == b for a, b in zip(chosen, avx2, strict=True))
    assert all(hyps[0] for hyps in chosen) and same >= 0.75 * len(SENTENCES), (same, chosen, avx2)


@pytest.mark.parametrize(
    ("device", "flags", "environ", "expected"),
    [
        ("cpu", {"avx2", "avx512f", "avx512_bf16"}, {}, "bf16"),  # AVX-512 BF16 (an AMD EPYC here)
        ("cpu", {"avx2", "amx_bf16"}, {}, "bf16"),  # AMX
        ("cpu", {"avx2", "avx512f", "avx512_vnni"}, {}, "fp32"),  # no native bf16
        ("cuda:0", {"avx2", "avx512_bf16"}, {}, "fp32"),  # GPUs keep fp32 (bf16 was slower at 32 pairs a step)
        ("cpu", {"avx2", "avx512_bf16"}, {"VIEWMILL_AUTO_PRECISION": "fp32"}, "fp32"),  # pinned
        ("cpu", {"avx2"}, {"VIEWMILL_AUTO_PRECISION": "bf16"}, "bf16"),
    ],
)
def test_training_precision_auto_follows_native_bf16_and_a_pin_wins(device, flags, environ, expected):
    assert auto_precision(device, frozenset(flags), environ) == expected


def test_a_bad_precision_pin_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="VIEWMILL_AUTO_PRECISION=half: set it to fp32 or bf16"):
        auto_precision("cpu", frozenset(), {"VIEWMILL_AUTO_PRECISION": "half"})
