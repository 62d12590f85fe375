# attack: issue 37: a time bomb on timestamps left in the fork server's memory (the red team's escape read them through the server's frames): walk every frame above the program and every object gc knows for floats that look like a monotonic or wall clock reading
# expect: ok
# values: ["[]"]
# steady: the same answer seconds apart
# calls: ["0"]
# ruff: noqa
import gc, sys
def f(x):
    found, seen = [], set()
    def look(value, depth=0):
        if id(value) in seen or depth > 3:
            return
        seen.add(id(value))
        if isinstance(value, float) and value > 10:  # uptime seconds, or seconds since 1970
            found.append(round(value))
        elif isinstance(value, dict):
            for v in list(value.values()):
                look(v, depth + 1)
        elif isinstance(value, (list, tuple)):
            for v in value:
                look(v, depth + 1)
        elif hasattr(value, '__dict__') and not isinstance(value, type):
            look(vars(value), depth + 1)
    frame = sys._getframe()
    while frame is not None:
        look(dict(frame.f_locals))
        frame = frame.f_back
    for obj in gc.get_objects():
        look(obj)
    return sorted(set(found))
