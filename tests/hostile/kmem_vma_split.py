# attack: issue 22: split one mapping into as many VMAs as pages (alternate protections), each touched: VMA structs, anon_vma chains and page tables
# expect: ok
# calls: ["0"]
# ruff: noqa
import ctypes, time
def f(hold):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page, vmas = 4096, 0
    for size in (32 << 20, 8 << 20, 2 << 20):
        while True:
            addr = libc.mmap(None, size, 3, 0x22, -1, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                break
            for off in range(0, size, 2 * page):
                ctypes.memset(addr + off, 1, 1)
                if libc.mprotect(addr + off, page, 1) != 0:
                    sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
                    return vmas
                vmas += 2
    sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
    return vmas
