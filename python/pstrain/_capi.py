"""ctypes binding of libpstrain_torch.so, the C ABI of worker/external/pstrain_c.h.

Finds and loads the library, declares every function's signature, and turns
the ABI's nonzero return codes (absl::StatusCode numbers) into exceptions.
Imports nothing but the standard library.
"""

import ctypes
import json
import os
import pathlib

ABI_VERSION = 9  # PST_ABI_VERSION of pstrain_c.h
PST_FP32 = 1
PST_CPU, PST_CUDA = 0, 1  # pst_register's device
PST_TRAINED, PST_BROADCAST, PST_AVERAGE = 0, 1, 2  # pst_register's buffers
PST_NO_DAEMON, PST_SCHEDULER, PST_SERVER = 0, 1, 2  # pst_error_daemon
LIBRARY = "libpstrain_torch.so"
BUILD_COMMAND = "bazel build //worker/external:libpstrain_torch.so"

# absl::StatusCode numbers the ABI returns.
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
FAILED_PRECONDITION = 9
ABORTED = 10
UNAVAILABLE = 14
UNAUTHENTICATED = 16

_ERR_LEN = 4096


class PstrainError(RuntimeError):
    """A pstrain call failed; `code` is its absl::StatusCode number."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class Unavailable(PstrainError, ConnectionError):
    """A daemon could not be reached within the retries (UNAVAILABLE); the
    subclass names which: SchedulerUnavailable or ServerUnavailable."""


class SchedulerUnavailable(Unavailable):
    """The scheduler could not be reached (UNAVAILABLE); the message names
    its address."""


class ServerUnavailable(Unavailable):
    """A server could not be reached within the retries (UNAVAILABLE): a
    pull or push of a clock, a row pull or push of a sparse table, a read
    of the optimizer's state; the message names the server (and its
    address where known)."""


class Unauthenticated(PstrainError, PermissionError):
    """The cluster refused this worker's credentials (UNAUTHENTICATED)."""


class ModelMismatch(PstrainError, ValueError):
    """This worker's parameters differ from the job's model."""


class InvalidArgument(PstrainError, ValueError):
    """A flag, a value or an argument was refused (INVALID_ARGUMENT)."""


class JobAborted(PstrainError):
    """The job was aborted (ABORTED)."""


class LibraryNotFound(ImportError):
    """libpstrain_torch.so is not where pstrain looks for it."""


_ERRORS = {
    INVALID_ARGUMENT: InvalidArgument,
    ABORTED: JobAborted,
    UNAVAILABLE: Unavailable,
    UNAUTHENTICATED: Unauthenticated,
}


class JobInfo(ctypes.Structure):
    """pst_job_info: what the job says, after joining (pst_join) or
    registration (pst_register)."""

    _fields_ = [
        ("worker_id", ctypes.c_int32),
        ("num_workers", ctypes.c_int32),
        ("num_servers", ctypes.c_int32),
        ("batch_size", ctypes.c_int64),
        ("total_clocks", ctypes.c_int64),
        ("start_clock", ctypes.c_int64),
        ("clocks_per_epoch", ctypes.c_int64),
        ("seed", ctypes.c_uint64),
        ("consistency", ctypes.c_int32),
        ("staleness", ctypes.c_int32),
        ("overlap", ctypes.c_int32),
    ]


_p = ctypes.c_void_p
_i = ctypes.c_int
_i64 = ctypes.c_int64
_str = ctypes.c_char_p
_err = [ctypes.c_char_p, ctypes.c_int]

# name: (restype, argtypes), as declared in pstrain_c.h.
_SIGNATURES = {
    "pst_abi_version": (_i, []),
    "pst_error_daemon": (_i, []),
    "pst_set_flag": (_i, [_str, _str] + _err),
    "pst_open": (_i, [ctypes.POINTER(_p)] + _err),
    "pst_register": (_i, [_p, _i, ctypes.POINTER(_str), ctypes.POINTER(_i),
                          ctypes.POINTER(_i64), ctypes.POINTER(_i), ctypes.POINTER(_i), _i64,
                          _i] + _err),
    "pst_join": (_i, [_p] + _err),
    "pst_job": (_i, [_p, ctypes.POINTER(JobInfo)]),
    "pst_job_json": (_i, [_p, _str, _i]),
    "pst_start": (_i, [_p, ctypes.POINTER(_p)] + _err),
    "pst_next": (_i, [_p, _i, ctypes.POINTER(_i64), ctypes.POINTER(_i),
                      ctypes.POINTER(_i64), _i] + _err),
    "pst_clock_share": (_i, [_p, ctypes.POINTER(_i), ctypes.POINTER(_i)]),
    "pst_read_state": (_i, [_p] + _err),
    "pst_state_arrays": (_i, [_p, _i]),
    "pst_state": (_p, [_p, _i, _i]),
    "pst_state_steps": (_i64, [_p, _i]),
    "pst_write_state": (_i, [_p, _i, _i64, _i, ctypes.POINTER(_p)] + _err),
    "pst_read_by_layer": (_i, [_p, _i] + _err),
    "pst_weights_await": (_i, [_p, _i] + _err),
    "pst_weights": (_p, [_p, _i]),
    "pst_grads": (_p, [_p, _i]),
    "pst_grads_ready": (_i, [_p, _i] + _err),
    "pst_grads_absent": (_i, [_p, _i] + _err),
    "pst_grads_at": (_i, [_p, _i, _p] + _err),
    "pst_clock_done": (_i, [_p, ctypes.c_double, _i64, _i64] + _err),
    "pst_finish": (_i, [_p, _i, ctypes.c_double, _str]),
    "pst_status": (_i, [_p, _str, _i]),
    "pst_close": (None, [_p]),
    "pst_batch_indices": (_i, [ctypes.c_uint64, _i64, _i64, _i64, _i, _i,
                               ctypes.POINTER(_i64), _i]),
    "pst_pull_rows": (_i, [_p, _str, _i64, _p, _i, _p] + _err),
    "pst_push_rows": (_i, [_p, _str, _i64, _p, _i, _p] + _err),
    "pst_initial_rows": (_i, [ctypes.c_uint64, _str, _i, ctypes.c_float, _i64, _p, _p]),
}

_lib = None


def candidates():
    """The paths tried, in order: $PSTRAIN_LIB alone if set, else beside the
    package (an installed wheel's), else the repository's bazel-bin."""
    if os.environ.get("PSTRAIN_LIB"):
        return [pathlib.Path(os.environ["PSTRAIN_LIB"])]
    package = pathlib.Path(__file__).resolve().parent
    repo = package.parent.parent
    return [package / LIBRARY, repo / "bazel-bin" / "worker" / "external" / LIBRARY]


def lib():
    """The loaded library (loaded once); LibraryNotFound if absent, ImportError
    if it cannot be loaded or speaks another ABI version."""
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


def _load():
    tried = candidates()
    path = next((p for p in tried if p.is_file()), None)
    if path is None:
        raise LibraryNotFound(
            "pstrain: %s not found; tried %s. Build it with `%s` or set PSTRAIN_LIB "
            "to its path." % (LIBRARY, ", ".join(map(str, tried)), BUILD_COMMAND))
    try:
        _preload_wheel_libraries(path)
        cdll = ctypes.CDLL(str(path))
    except OSError as e:
        raise ImportError("pstrain: cannot load %s: %s" % (path, e)) from e
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            raise ImportError("pstrain: %s has no %s (an older build? rebuild with `%s`)"
                              % (path, name, BUILD_COMMAND)) from None
        fn.restype, fn.argtypes = restype, argtypes
    version = cdll.pst_abi_version()
    if version != ABI_VERSION:
        raise ImportError("pstrain: %s speaks ABI version %d; this package needs %d"
                          % (path, version, ABI_VERSION))
    return cdll


def _preload_wheel_libraries(path):
    """An installed wheel's libraries (pstrain.libs beside the package: gRPC,
    protobuf, Abseil, ..., as auditwheel lays them out) loaded before
    `path` needs them, each after those it needs (load-order.txt, written
    by deploy/wheel.py), so that every one resolves to the wheel's copy and
    none to a system one (as torch loads its CUDA wheels' libraries)."""
    here = pathlib.Path(__file__).resolve().parent
    order = here.parent / "pstrain.libs" / "load-order.txt"
    if path.parent != here or not order.is_file():
        return
    for name in order.read_text().split():
        ctypes.CDLL(str(order.parent / name), mode=ctypes.RTLD_GLOBAL)


def call(name, *args, errors=None):
    """Calls `name` with `args` and an error buffer appended; raises the
    exception of its return code (`errors` maps codes to classes first)."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = getattr(lib(), name)(*args, err, _ERR_LEN)
    check(code, err.value.decode("utf-8", "replace"), name, errors)
    return code


_UNAVAILABLE = {PST_SCHEDULER: SchedulerUnavailable, PST_SERVER: ServerUnavailable}


def check(code, message, name, errors=None):
    """Raises the exception of a nonzero return code of `name`, called just
    after the call that returned it (an UNAVAILABLE's class is the daemon
    the call went to: pst_error_daemon)."""
    if code == 0:
        return
    cls = (errors or {}).get(code) or _ERRORS.get(code, PstrainError)
    if cls is Unavailable:
        cls = _UNAVAILABLE.get(lib().pst_error_daemon(), Unavailable)
    raise cls(message or "%s failed with status code %d" % (name, code), code)


def job_info(handle):
    """The worker's pst_job_info (after pst_join or pst_register)."""
    info = JobInfo()
    check(lib().pst_job(handle, ctypes.byref(info)), "", "pst_job")
    return info


def job_spec(handle):
    """The worker's job spec as a dict of the proto's field names (after
    pst_join or pst_register)."""
    size = lib().pst_job_json(handle, None, 0)
    if size < 0:
        raise PstrainError("pst_job_json: the worker has not joined")
    buf = ctypes.create_string_buffer(size + 1)
    lib().pst_job_json(handle, buf, size + 1)
    return json.loads(buf.value.decode("utf-8"))
