# attack: keep 100 MB buffers in a list until memory runs out
# expect: memory memory
# calls: ["0"]
# ruff: noqa
def f(x):
    hog = []
    while True:
        hog.append(bytearray(10**8))
