"""The ctypes declarations (qmoe/_lib.py, qmoe/_prepack.py) agree with include/qmoe/qmoe.h and
qmoe/weights.h: the numbers of every enum, the fields of qmoe_grouped_matmul_swiglu_quant_options
and of qmoe_weights_options, so a change to the C API cannot silently break Python."""

import ctypes
import re
from pathlib import Path

import qmoe
from qmoe import _lib, _prepack

ROOT = Path(__file__).resolve().parents[2]
HEADER = (ROOT / "include" / "qmoe" / "qmoe.h").read_text()
WEIGHTS_HEADER = (ROOT / "include" / "qmoe" / "weights.h").read_text()


def header_constants():
    found = dict(re.findall(r"\b(QMOE_[A-Z0-9_]+)\s*=\s*(\d+)", HEADER))
    found.update(re.findall(r"#define\s+(QMOE_MAX_DIMS)\s+(\d+)", HEADER))
    return {k: int(v) for k, v in found.items()}


def test_enum_numbers_match_the_header():
    h = header_constants()
    python = {
        "QMOE_OK": _lib.OK,
        "QMOE_ERR_PARAM_NULLPTR": _lib.ERR_PARAM_NULLPTR,
        "QMOE_ERR_PARAM_INVALID": _lib.ERR_PARAM_INVALID,
        "QMOE_ERR_RUNTIME": _lib.ERR_RUNTIME,
        "QMOE_ERR_INNER": _lib.ERR_INNER,
        "QMOE_FORMAT_ND": _lib.FORMAT_ND,
        "QMOE_FORMAT_FRACTAL_NZ": _lib.FORMAT_FRACTAL_NZ,
        "QMOE_GROUP_LIST_CUMSUM": _lib.GROUP_LIST_CUMSUM,
        "QMOE_GROUP_LIST_COUNT": _lib.GROUP_LIST_COUNT,
        "QMOE_MAX_DIMS": _lib.MAX_DIMS,
    }
    python.update({f"QMOE_DTYPE_{n[6:]}": getattr(_lib, n) for n in dir(_lib)
                   if n.startswith("DTYPE_")})
    python.update({f"QMOE_KERNEL_{k.upper()}": v for k, v in _lib.KERNELS.items()})
    for name, value in python.items():
        assert h.get(name) == value, f"{name}: header {h.get(name)}, Python {value}"
    # and nothing of these families is missing on the Python side
    for name in h:
        if name.startswith(("QMOE_DTYPE_", "QMOE_KERNEL_", "QMOE_ERR_", "QMOE_FORMAT_")):
            assert name in python, f"{name} is in the header but not in qmoe/_lib.py"


def test_op_options_fields_match_the_header():
    body = re.search(r"typedef struct qmoe_grouped_matmul_swiglu_quant_options\s*\{(.*?)\}\s*qmoe_grouped_matmul_swiglu_quant_options;", HEADER,
                     re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = re.findall(r"^\s*(?:const\s+)?(?:int|uint32_t|float|qmoe_\w+)\s*\*?\s*(\w+)\s*;", body, re.M)
    assert len(fields) == body.count(";"), "a field of a type this test does not read"
    assert fields[0] == "struct_size" and _lib.OpOptions._fields_[0][1] is _lib.c_uint32
    assert fields == [name for name, _ in _lib.OpOptions._fields_]


# C field types -> the ctypes type of the same size and signedness (C enums are int-sized).
_C_TYPES = {"int": ctypes.c_int, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
            "qmoe_kernel": ctypes.c_int, "const int8_t *": ctypes.POINTER(ctypes.c_int8)}


def test_weights_options_fields_match_the_header():
    body = re.search(r"typedef struct qmoe_weights_options\s*\{(.*?)\}\s*qmoe_weights_options;",
                     WEIGHTS_HEADER, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = [(" ".join(ctype.replace("*", " * ").split()), name) for ctype, name in
              re.findall(r"^\s*((?:const\s+)?\w+\s*(?:\*\s*|\s))(\w+)\s*;", body, re.M)]
    assert len(fields) == body.count(";"), "a field this test does not read"
    assert all(ctype in _C_TYPES for ctype, _ in fields), fields
    assert [(name, _C_TYPES[ctype]) for ctype, name in fields] == \
        [(name, t) for name, t in _prepack.WeightsOptions._fields_]
    # QMOE_WEIGHTS_OPTIONS_INIT initialises every field (struct_size first)
    init = re.search(r"#define\s+QMOE_WEIGHTS_OPTIONS_INIT\s*\{(.*)\}", WEIGHTS_HEADER).group(1)
    assert init.count(",") + 1 == len(fields) and "sizeof(qmoe_weights_options)" in init


def test_versions_agree():
    # One source: CMakeLists.txt's project(VERSION) -> qmoe/version.h, qmoe_version() and
    # (pyproject.toml's regex provider) the package's metadata.
    cmake = re.search(r"^project\(qmoe VERSION (\d+\.\d+\.\d+)",
                      (ROOT / "CMakeLists.txt").read_text(), re.M).group(1)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic\s*=\s*\["version"\]', pyproject, re.M)
    regex = re.search(r"^regex\s*=\s*'([^']+)'", pyproject, re.M).group(1)
    assert re.search(regex, (ROOT / "CMakeLists.txt").read_text()).group("value") == cmake
    assert qmoe.__version__ == cmake == qmoe.library_version()
