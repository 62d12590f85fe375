# attack: issue 37: a gold output that depends on the sandbox's memory_mb through a MemoryError threshold (300 MB fits under 512, not under 256): validated under one limit, a student's input run by the checker under another gets the other output; the task records its gold limits and the checker refuses it under other ones
# expect: ok
# values: ["'fits'"]
# validate: valid
# task: code_i
# calls: ["300"]
# limits: [{"memory_mb": 256}, {"memory_mb": 512}]
# ruff: noqa
def f(n):
    try:
        block = bytes(n * 1024 * 1024)  # calloc: address space, no page touched
        return 'fits'
    except MemoryError:
        return 'too big'
