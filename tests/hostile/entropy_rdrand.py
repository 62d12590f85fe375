# attack: issue 37: the CPU's own random numbers (rdrand from machine code through ctypes): no x86 process can be denied the instruction, so only the determinism check stands (replicas differ)
# expect: ok|crashed crashed:SIGILL
# validate: nondeterministic|crashed:SIGILL
# calls: ["0"]
# ruff: noqa
import ctypes, mmap
def f(x):
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(b"\x48\x0f\xc7\xf0\x73\xfa\xc3")  # 1: rdrand rax; jnc 1b; ret
    rdrand = ctypes.CFUNCTYPE(ctypes.c_uint64)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    return rdrand() & 0xffff
