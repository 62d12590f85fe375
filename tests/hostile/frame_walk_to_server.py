# attack: walk the frames up to the fork server's serve() and read every string it holds (other jobs' programs and inputs were there)
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["[]"]
import sys
def f(x):
    texts = []
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            for item in list(items):
                if isinstance(item, dict):
                    texts += [v for v in item.values() if isinstance(v, str)]
                elif isinstance(item, (str, bytes, bytearray)):
                    texts.append(item)
        frame = frame.f_back
    return [t for t in texts if 'def ' in str(t) and 'frame_walk_to_server' not in str(t)]
