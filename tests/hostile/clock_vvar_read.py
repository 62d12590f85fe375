# attack: issue 37: read the kernel's clock data straight from the vvar pages mapped below the vDSO (found through the auxiliary vector), no call at all
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import ctypes
def f(x):
    libc = ctypes.CDLL(None)
    libc.getauxval.restype = ctypes.c_ulong
    vdso = libc.getauxval(33)  # AT_SYSINFO_EHDR
    # the vvar pages lie just below the vDSO: scan them for the seconds of the coarse clock
    data = ctypes.string_at(vdso - 6 * 4096, 6 * 4096)
    return sum(data) % 1000
