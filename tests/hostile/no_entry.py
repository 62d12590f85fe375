# attack: no function f
# expect: error no_entry_function
# calls: ["0"]
# ruff: noqa
f = 3
