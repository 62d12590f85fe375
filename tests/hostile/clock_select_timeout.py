# attack: issue 37: a select() and a poll() with a timeout (Linux writes back the time left; readiness of the output pipe says how far the server has read)
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import select
def f(x):
    ready = select.select([], [1], [], 0.05)[1]
    p = select.poll()
    p.register(1, select.POLLOUT)
    return [ready, p.poll(10)]
