# attack: argument text that tries to smuggle a call
# expect: error bad_input
# calls: ["__import__('os').system('touch /tmp/populora_pwned_bad_input_injection')"]
# ruff: noqa
def f(x):
    return x
