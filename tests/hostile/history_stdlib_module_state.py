# attack: issue 37: call history stashed in an attribute of a module the fork server imported before forking (no filter, no strip layer): it lives only in the child's copy of the module, so each input alone every call is the first
# expect: ok
# values: ["1", "4", "9", "16", "25", "36", "49", "64", "81", "100"]
# validate: valid
# task: code_f
# calls: ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
# ruff: noqa
import json
def f(n):
    count = getattr(json, "populora_calls", 0) + 1
    json.populora_calls = count
    return n * count
