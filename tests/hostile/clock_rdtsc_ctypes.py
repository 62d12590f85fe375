# attack: issue 37: the time-stamp counter: rdtsc from a page of machine code made executable through ctypes (no system call for seccomp to see)
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import ctypes, mmap
def f(x):
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(b"\x0f\x31\x48\xc1\xe2\x20\x48\x09\xd0\xc3")  # rdtsc; shl rdx, 32; or rax, rdx; ret
    rdtsc = ctypes.CFUNCTYPE(ctypes.c_uint64)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    return rdtsc() >> 33
