# attack: issue 37: a code_f task whose hidden outputs depend on memory_mb (the shown inputs fit under any limit, the hidden ones under 512 MB and not under 256): a student's program judged under other limits than its gold's would be judged against the wrong outputs; refused instead
# expect: ok
# values: ["'fits'", "'fits'", "'fits'", "'fits'", "'fits'", "'fits'", "'fits'", "'fits'", "'fits'", "'fits'"]
# validate: valid
# task: code_f
# calls: ["1", "2", "4", "8", "16", "260", "280", "300", "320", "340"]
# limits: [{"memory_mb": 256}, {"memory_mb": 512}]
# ruff: noqa
def f(n):
    try:
        block = bytes(n * 1024 * 1024)  # calloc: address space, no page touched
        return 'fits'
    except MemoryError:
        return 'too big'
