"""The Absolute Zero Reasoner's prompt templates, verbatim, and one pure formatter per role x task type.

Source: the Absolute Zero Reasoner (AZR), https://github.com/LeapLabTHU/Absolute-Zero-Reasoner at
commit a82124e514e2 (a82124e514e27692aa9860c5ee21dbf9d81e3bc5), MIT License, Copyright (c) 2025 LeapLab:

    Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
    associated documentation files (the "Software"), to deal in the Software without restriction,
    including without limitation the rights to use, copy, modify, merge, publish, distribute,
    sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
    furnished to do so, subject to the following conditions: The above copyright notice and this
    permission notice shall be included in all copies or substantial portions of the Software.
    THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.

The template texts below are AZR's, character for character (including its typos and the swapped
"Evaluation Criteria" lines of the code_i and code_o proposer prompts: the code_i prompt asks for
difficulty in predicting the output, the code_o prompt for difficulty in predicting the input).
The formatters reproduce ``get_code_problem_generator_prompt`` and
``get_code_problem_predictor_prompt`` (``absolute_zero_reasoner/data_construction/prompts.py``) with
AZR's default configuration: no composite functions, ``remove_after_return`` and
``remove_input_from_snippet`` off, 10 code_f inputs. ``format_r1`` wraps a question in AZR's
``instruction_following`` wrapper, whose prompt ends in ``<think>`` (the model starts reasoning);
``r1_format_ok`` is AZR's format check on the completion. What AZR's parser expects back:

- proposer code_i / code_o / code_e: a ```` ```python ```` block (the program) and an ```` ```input ````
  block, inside ``<answer>...</answer>``;
- proposer code_f: ``num_inputs`` ```` ```input ```` blocks and one ```` ```message ```` block;
- solver code_i: an ```` ```input ```` block; code_o and code_e: an ```` ```output ```` block (code_e: the
  error type name, or ``NoError``); code_f: a ```` ```python ```` block (the last one counts).

Nothing here is wired into the loop; the task kinds choose their templates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

AZR_COMMIT = "a82124e514e27692aa9860c5ee21dbf9d81e3bc5"

# The R1 wrapper: AZR absolute_zero_reasoner/data_construction/process_data.py:51
# (`instruction_following`). The question is inserted as is (AZR's questions start and end with newlines).
R1_WRAPPER = "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>. User: {}\nAssistant: <think>"

# The words AZR's proposer prompts forbid "in any form, even in comments" (its ``<|BANNED_KEYWORDS|>``):
# AZR absolute_zero_reasoner/configs/azr_ppo_trainer.yaml:529-546 (`azr.data_selection_strategy.banned_words`),
# in that order, `datetime` listed twice as there.
AZR_BANNED_KEYWORDS = (
    "logging", "random", "multiprocessing", "pebble", "subprocess", "threading", "datetime", "time",
    "hashlib", "hmac", "bcrypt", "os.sys", "os.path", "sys.exit", "os.environ", "calendar", "datetime",
)

# Proposer, code_i (abduction: the solver will be given f and the output): AZR absolute_zero_reasoner/data_construction/prompts.py:3-59 (`code_input_prompt`).
PROPOSER_CODE_I = """
## Task: Create a Python Code Snippet (where custom classes are allowed, which should be defined at the top of the code snippet) with one Matching Input

Using the reference code snippets provided below as examples, design a new and unique Python code snippet that demands deep algorithmic reasoning to deduce one possible input from a given output. Your submission should include both a code snippet and test input pair, where the input will be plugged into the code snippet to produce the output, which that function output be given to a test subject to come up with any input that will produce the same function output. This is meant to be an I.Q. test.

### Code Requirements:
- Name the entry function `f` (e.g., `def f(...): ...`), you can have nested definitions inside `f`
- Ensure the function returns a value
- Include at least one input parameter
- Make the function deterministic
- Make the snippet require state tracking across multiple data transformations, ensuring the task requires long multi step reasoning
- AVOID THE FOLLOWING:
  * Random functions or variables
  * Date/time operations
  * I/O operations (reading files, network requests)
  * Printing or logging
  * Any external state
- Ensure execution completes within 10 seconds on a modern CPU
- All imports and class definitions should be at the very top of the code snippet
- The snippet should end with a return statement from the main function `f`, anything after will be removed
{remove_input_from_snippet_prompt}{remove_after_return_prompt}
### Input Requirements:
- Provide exactly one test input for your function
- Format multiple arguments with commas between them
- Remember to add quotes around string arguments

### Formatting:
- Format your code with: ```python
  def f(...):
      # your code here
      return ...
  ```
- Format your input with: ```input
  arg1, arg2, ...
  ```

### Example Format:
```python
def f(name: str, info: dict):
    # code logic here
    return result
```

```input
'John', {{'age': 20, 'city': 'New York'}}
```

### Evaluation Criteria:
- Executability, your code should be executable given your input
- Difficulty in predicting the output from your provided input and code snippet. Focus on either algorithmic reasoning or logic complexity. For example, you can define complex data structure classes and operate on them like trees, heaps, stacks, queues, graphs, etc, or use complex control flow, dynamic programming, recursions, divide and conquer, greedy, backtracking, etc
- Creativity, the code needs to be sufficiently different from the provided reference snippets
- Restricted usage of certain keywords and packages, you are not allowed to use the following words in any form, even in comments: <|BANNED_KEYWORDS|>

First, carefully devise a clear plan: e.g., identify how your snippet will be challenging, distinct from reference snippets, and creative. Then, write the final code snippet and its inputs.

### Reference Code Snippets:
"""

# Proposer, code_o (deduction: the solver will be given f and the input): AZR absolute_zero_reasoner/data_construction/prompts.py:61-119 (`code_output_prompt`).
PROPOSER_CODE_O = """
## Task: Create a New Python Code Snippet (where custom classes are allowed, which should be defined at the top of the code snippet) with one Matching Input

Using the reference code snippets provided below as examples, design a new and unique Python code snippet that demands deep algorithmic reasoning to deduce the output from the input. Your submission should include a code snippet and a test input pair, where the input will be plugged into the code snippet to produce the output. The input will be given to a test subject to deduce the output, which is meant to be an I.Q. test.

### Code Requirements:
- Name the entry function `f` (e.g., `def f(...): ...`), you can have nested definitions inside `f`
- Ensure the function returns a value
- Include at least one input parameter
- Make the function deterministic
- Make the snippet require state tracking across multiple data transformations, ensuring the task requires long multi step reasoning
- AVOID THE FOLLOWING:
  * Random functions or variables
  * Date/time operations
  * I/O operations (reading files, network requests)
  * Printing or logging
  * Any external state
- Ensure execution completes within 10 seconds on a modern CPU
- All imports and class definitions should be at the very top of the code snippet
- The snippet should end with a return statement from the main function `f`, anything after will be removed
{remove_input_from_snippet_prompt}{remove_after_return_prompt}
### Input Requirements:
- Provide exactly one test input for your function
- Format multiple arguments with commas between them
- Remember to add quotes around string arguments

### Formatting:
- Format your code with:
```python
def f(...):
    # your code here
    return ...
```
- Format your input with:
```input
arg1, arg2, ...
```

### Example Format:
```python
def f(name: str, info: dict):
    # code logic here
    return result
```

```input
'John', {{'age': 20, 'city': 'New York'}}
```

### Evaluation Criteria:
- Executability, your code should be executable given your input
- Difficulty in predicting your ```input``` from 1) your ```python``` code and 2) the deterministic ```output``` that will be obtained from your ```input```. Focus on either algorithmic reasoning or logic complexity. For example, you can define complex data structure classes and operate on them like trees, heaps, stacks, queues, graphs, etc, or use complex control flow, dynamic programming, recursions, divide and conquer, greedy, backtracking, etc
- Creativity, the code needs to be sufficiently different from the provided reference snippets
- Restricted usage of certain keywords and packages, you are not allowed to use the following words in any form, even in comments: <|BANNED_KEYWORDS|>

First, carefully devise a clear plan: e.g., identify how your snippet will be challenging, distinct from reference snippets, and creative. Then, write the final code snippet and its inputs.

### Reference Code Snippets:
"""

# Proposer, code_e (error prediction, off by default in AZR's scripts): AZR absolute_zero_reasoner/data_construction/prompts.py:121-179 (`code_error_prompt`).
PROPOSER_CODE_E = """
## Task: Create a New Python Code Snippet (where custom classes are allowed, which should be defined at the top of the code snippet) with one Matching Input

Using the reference code snippets provided below as examples, design a new and unique Python code snippet that demands deep algorithmic reasoning to deduce what type of error will be raised when the code is executed. Your submission should include a code snippet and a test input pair, where the input will be plugged into the code snippet to produce the error. You can also choose to include a custom error type in your code snippet. However, the code can also be designed to raise no error. The input and the code will be given to a test subject to deduce the error type, which is meant to be an I.Q. test.

### Code Requirements:
- Name the entry function `f` (e.g., `def f(...): ...`), you can have nested definitions inside `f`
- Ensure the function returns a value
- Include at least one input parameter
- Make the function deterministic
- Make the snippet require state tracking across multiple data transformations, ensuring the task requires long multi step reasoning
- AVOID THE FOLLOWING:
  * Random functions or variables
  * Date/time operations
  * I/O operations (reading files, network requests)
  * Printing or logging
  * Any external state
- Ensure execution completes within 10 seconds on a modern CPU
- All imports and class definitions should be at the very top of the code snippet
- The snippet should end with a return statement from the main function `f`, anything after will be removed
{remove_after_return_prompt}
### Input Requirements:
- Provide exactly one test input for your function
- Format multiple arguments with commas between them
- Remember to add quotes around string arguments

### Formatting:
- Format your code with:
```python
def f(...):
    # your code here
    return ...
```
- Format your input with:
```input
arg1, arg2, ...
```

### Example Format:
```python
def f(name: str, info: dict):
    # code logic here
    return result
```

```input
'John', {{'age': 20, 'city': 'New York'}}
```

### Evaluation Criteria:
- Executability, your code should be executable given your input
- Difficulty in deducing the error type (or no error) from 1) your ```python``` code and ```input```. Focus on either algorithmic reasoning or logic complexity. For example, you can define complex data structure classes and operate on them like trees, heaps, stacks, queues, graphs, etc, or use complex control flow, dynamic programming, recursions, divide and conquer, greedy, backtracking, etc
- Creativity, the code needs to be sufficiently different from the provided reference snippets
- Restricted usage of certain keywords and packages, you are not allowed to use the following words in any form, even in comments: <|BANNED_KEYWORDS|>
<|BANNED_ASSERTION_KEYWORDS|>
First, carefully devise a clear plan: e.g., identify how your snippet will be challenging, distinct from reference snippets, and creative. Then, write the final code snippet and its inputs. The code needs to compile and pass AST checks, but it is intended to raise an error or not.

### Reference Code Snippets:
"""

# Proposer, code_f (induction): conditioned on ONE program, given with CODE_F_SUFFIX: AZR absolute_zero_reasoner/data_construction/prompts.py:181-223 (`code_function_prompt`).
PROPOSER_CODE_F = """
## Task: Output {num_inputs} Inputs that can be plugged into the following Code Snippet to produce diverse Outputs, and give a message related to the given snippet.

Using the code snippet provided below, design {num_inputs} inputs that can be plugged into the code snippet to produce a diverse set of outputs. A subset of your given input and its deterministically produced outputs will be given to a test subject to deduce the function, which is meant to be an I.Q. test. You can also leave a message to the test subject to help them deduce the code snippet.

### Input Requirements:
- Provide {num_inputs} valid inputs for the code snippet
- For each input, format multiple arguments with commas between them
- Remember to add quotes around string arguments
- Each input should be individually wrapped in ```input``` tags

### Message Requirements:
- Leave a message to the test subject to help them deduce the code snippet
- The message should be wrapped in ```message``` tags
- The message can be in any form, can even be formed into a coding question, or a natural language instruction what the code snippet does
- You cannot provide the code snippet in the message

### Formatting:
- Format your input with:
```input
arg1, arg2, ...
```

### Example Format:
```input
'John', {{'age': 20, 'city': 'New York'}}
```
```input
'Sammy', {{'age': 37, 'city': 'Los Angeles'}}
```

### Evaluation Criteria:
- Executability, your code should be executable given your inputs
- Coverage, the inputs and outputs should cover the whole input space of the code snippet, able to deduce the code snippet from the inputs and outputs
- Creativity, the inputs need to be sufficiently different from each other
- The overall selection of inputs and message combined should be challenging for the test subject, but not impossible for them to solve
First, carefully devise a clear plan: e.g., understand the code snippet, then identify how your proposed inputs have high coverage, and why the inputs will be challenging and creative. Then, write the inputs and message. Remember to wrap your inputs in ```input``` tags, and your message in ```message``` tags.

### Code Snippet:
```python
{snippet}
```
"""

# Solver, code_i: AZR absolute_zero_reasoner/data_construction/prompts.py:225-247 (`code_input_predictor_prompt`).
SOLVER_CODE_I = """
# Task: Provide One Possible Input of a Python Code Snippet Given the Code and Output
Given the following Code Snippet and the Output, think step by step then provide one possible input that produced the output. The input needs to be wrapped in ```input``` tags. Remember if an argument is a string, wrap it in quotes. If the function requires multiple arguments, separate them with commas.

# Code Snippet:
```python
{snippet}
```

# Output:
```output
{output}
```

# Output Format:
```input
arg1, arg2, ...
```
# Example Output:
```input
'John', {{'age': 20, 'city': 'New York'}}
```
"""

# Solver, code_o: AZR absolute_zero_reasoner/data_construction/prompts.py:249-267 (`code_output_predictor_prompt`).
SOLVER_CODE_O = """
# Task: Deduce the Output of a Python Code Snippet Given the Code and Input
Given the following Code Snippet and the Input, think step by step then deduce the output that will be produced from plugging the Input into the Code Snippet. Put your output in ```output``` tags. Remember if the output is a string, wrap it in quotes. If the function returns multiple values, remember to use a tuple to wrap them.

# Code Snippet:
```python
{snippet}
```

# Input:
```input
{input_args}
```

# Example Output:
```output
{{'age': 20, 'city': 'New York'}}
```
"""

# Solver, code_e: AZR absolute_zero_reasoner/data_construction/prompts.py:269-287 (`code_error_predictor_prompt`).
SOLVER_CODE_E = """
# Task: Deduce the Error Type of a Python Code Snippet Given the Code and Input
Given the following Code Snippet and the Input, think step by step to deduce the error type that will be raised when the code is executed. Put your final output in ```output``` tags. If there are no errors, put "NoError" in the ```output``` tags.

# Code Snippet:
```python
{snippet}
```

# Input:
```input
{input_args}
```

# Example Output:
```output
ValueError
```
"""

# Solver, code_f: AZR absolute_zero_reasoner/data_construction/prompts.py:291-325 (`code_function_predictor_prompt`).
SOLVER_CODE_F = """
# Task: Deduce the Function that Produced the Outputs from the Inputs
Given a set of input/output pairs and a message that describes the function, think through the problem step by step to deduce a general code snippet. This code should produce the hidden outputs from the hidden inputs, matching the original data-generating code that created the input/output pairs. Place your final answer inside python tags! It may be helpful to work through each input/output pair individually to test your function. If your function doesn’t work as expected, revise it until it does. The final code snippet will be used to evaluate your response, which is wrapped in ```python``` tags.

# Code Requirements:
- Name the entry function `f` (e.g., `def f(...): ...`), you can have nested definitions inside `f`
- Ensure the function returns a value
- Include at least one input parameter
- Make the function deterministic
- AVOID THE FOLLOWING:
  * Random functions or variables
  * Date/time operations
  * I/O operations (reading files, network requests)
  * Printing or logging
  * Any external state
- Ensure execution completes within 10 seconds on a modern CPU
- All imports and class definitions should be at the very top of the code snippet
- The snippet should end with a return statement from the main function `f()`, anything after will be removed

# Input and Output Pairs:
{input_output_pairs}

# Message:
```message
{message}
```

# Example Output:
```python
def f(a):
    return a
```

Name your entry function `f()`!!!
"""

# Appended to the program shown to a code_f proposer: AZR absolute_zero_reasoner/data_construction/prompts.py:289-289 (`code_suffix`).
CODE_F_SUFFIX = "\nf(<|YOUR INPUT WILL BE PLUGGED HERE|>)"

# Optional code_i/code_o requirement (off in AZR's runs): AZR absolute_zero_reasoner/data_construction/prompts.py:331-331 (`remove_input_from_snippet_prompt`).
REMOVE_INPUT_FROM_SNIPPET = "- Do not have the test input anywhere in the code snippet, provide it in the input section."

# Optional requirement when AZR removes code after the return (off in AZR's runs): AZR absolute_zero_reasoner/data_construction/prompts.py:333-333 (`remove_singleton_variables_prompt`).
REMOVE_SINGLETON_VARIABLES = "- All variable declarations must be inside the main function `f` or within functions `f` make calls to. Any variables declared outside of functions will be removed.\n"


# The reference block of one buffer task in a code_i/code_o/code_e proposer prompt:
# AZR absolute_zero_reasoner/data_construction/prompts.py:351 (inside `get_code_problem_generator_prompt`).
REFERENCE_BLOCK = "<snippet_{i}>\n```python\n{program}\n```\n```input\n{input}\n```\n```{output_kind}\n{output}\n```\n</snippet_{i}>\n"
# One shown pair in a code_f solver prompt: AZR prompts.py:409 (inside `get_code_problem_predictor_prompt`).
SHOWN_PAIR_BLOCK = "```input_{i}\n{input}\n```\n```output_{i}\n{output}\n```\n"
# AZR's format check: absolute_zero_reasoner/rewards/custom_evaluate.py:118 (`get_format_reward`, extraction
# type `answer*`), applied with re.match to the text after "Assistant:", which starts with the prompt's <think>.
# Kept as the specification: its two lazy `.*?` make it quadratic (each `</think><answer>` with no `</answer>`
# after it rescans the rest: 3.8 s on a 64 KB completion), so ``r1_format_ok`` decides the same in linear time.
R1_FORMAT = re.compile(r"(?s)<think>.*?</think>\s*<answer>.*?</answer>")
# The one part of R1_FORMAT that ``r1_format_ok`` still matches with a regex: one quantifier over one
# character class between two literals, so each run of whitespace is read by at most one attempt.
THINK_THEN_ANSWER = re.compile(r"</think>\s*<answer>")


class Reference(Protocol):
    """A buffer task shown to a proposer (``tasks.records.Task`` is one): program, input, output."""

    program: str
    input: str
    output: str


def format_r1(question: str) -> str:
    """``question`` inside AZR's R1 wrapper, exactly as AZR builds it; ends in ``Assistant: <think>``."""
    return R1_WRAPPER.format(question)


def r1_format_ok(completion: str, think_in_prompt: bool = True) -> bool:
    """AZR's format check: ``<think> ... </think>`` then (after whitespace) ``<answer> ... </answer>``.

    ``completion`` is the model's text after the prompt; with ``think_in_prompt`` (both wrappers end in
    ``<think>``) the opening tag is the prompt's, as in AZR, which checks the text after "Assistant:".
    Text after ``</answer>`` is allowed, as in AZR.

    The same verdict as ``R1_FORMAT.match`` (``tests/test_tasks_azr_templates.py`` compares them), in
    time linear in the text: R1_FORMAT matches exactly when the text starts with ``<think>`` and some
    ``</think>``, whitespace, ``<answer>`` is followed later by ``</answer>``; the first such
    ``<answer>`` leaves the most room, so one search for it and one ``find`` decide.
    """
    text = (("<think>" if think_in_prompt else "") + completion).strip()
    if not text.startswith("<think>"):
        return False
    opened = THINK_THEN_ANSWER.search(text, len("<think>"))
    return opened is not None and text.find("</answer>", opened.end()) >= 0


def _references(references: Sequence[Reference], output_kind: str) -> str:
    return "".join(
        REFERENCE_BLOCK.format(i=i, program=r.program, input=r.input, output_kind=output_kind, output=r.output)
        for i, r in enumerate(references)
    )


def _code_requirements(template: str, remove_after_return: bool, remove_input_from_snippet: bool | None) -> str:
    fields = {"remove_after_return_prompt": REMOVE_SINGLETON_VARIABLES if remove_after_return else "\n"}
    if remove_input_from_snippet is not None:
        fields["remove_input_from_snippet_prompt"] = REMOVE_INPUT_FROM_SNIPPET if remove_input_from_snippet else ""
    return template.format(**fields)


def teacher_code_i(
    references: Sequence[Reference],
    banned_keywords: Sequence[str] = AZR_BANNED_KEYWORDS,
    remove_after_return: bool = False,
    remove_input_from_snippet: bool = False,
) -> str:
    """AZR's code_i proposer question with K reference tasks (AZR prompts.py:352-363)."""
    head = _code_requirements(PROPOSER_CODE_I, remove_after_return, remove_input_from_snippet)
    return head.replace("<|BANNED_KEYWORDS|>", ", ".join(banned_keywords)) + _references(references, "output") + "\n"


def teacher_code_o(
    references: Sequence[Reference],
    banned_keywords: Sequence[str] = AZR_BANNED_KEYWORDS,
    remove_after_return: bool = False,
    remove_input_from_snippet: bool = False,
) -> str:
    """AZR's code_o proposer question with K reference tasks (AZR prompts.py:364-375)."""
    head = _code_requirements(PROPOSER_CODE_O, remove_after_return, remove_input_from_snippet)
    return head.replace("<|BANNED_KEYWORDS|>", ", ".join(banned_keywords)) + _references(references, "output") + "\n"


def teacher_code_e(
    references: Sequence[Reference],
    banned_keywords: Sequence[str] = AZR_BANNED_KEYWORDS,
    banned_assertion_keywords: Sequence[str] = (),
    remove_after_return: bool = False,
) -> str:
    """AZR's code_e proposer question; references' outputs are error type names (AZR prompts.py:381-397).

    ``banned_assertion_keywords``: AZR's config default is none; its run scripts pass ``['raise']``.
    """
    head = _code_requirements(PROPOSER_CODE_E, remove_after_return, None)
    assertion = (
        "- The following error handling keywords are not allowed to be used in the code snippet: "
        + ", ".join(banned_assertion_keywords) + "\n"
        if banned_assertion_keywords else "\n"
    )
    head = head.replace("<|BANNED_KEYWORDS|>", ", ".join(banned_keywords)).replace("<|BANNED_ASSERTION_KEYWORDS|>", assertion)
    return head + _references(references, "error") + "\n"


def teacher_code_f(program: str, num_inputs: int = 10) -> str:
    """AZR's code_f proposer question: ONE program (with ``f(<|YOUR INPUT ...|>)`` appended), no other examples.

    AZR prompts.py:376-380; AZR conditions it on one program (``io_n = 1`` for code_f,
    azr_ray_trainer.py:660) drawn from the code_i/code_o datasets.
    """
    if num_inputs < 1:
        raise ValueError(f"teacher_code_f: num_inputs must be >= 1, got {num_inputs}")
    return PROPOSER_CODE_F.format(num_inputs=num_inputs, snippet=program + CODE_F_SUFFIX)


def student_code_i(program: str, output: str) -> str:
    """AZR's code_i solver question: the program and the output; answer in an ```input block."""
    return SOLVER_CODE_I.format(snippet=program, output=output)


def student_code_o(program: str, input: str) -> str:
    """AZR's code_o solver question: the program and the input; answer in an ```output block."""
    return SOLVER_CODE_O.format(snippet=program, input_args=input)


def student_code_e(program: str, input: str) -> str:
    """AZR's code_e solver question: the error type (or ``NoError``) in an ```output block."""
    return SOLVER_CODE_E.format(snippet=program, input_args=input)


def student_code_f(shown_pairs: Sequence[tuple[str, str]], message: str) -> str:
    """AZR's code_f solver question: the shown (input, output) pairs and the message; a ```python answer."""
    pairs = "".join(SHOWN_PAIR_BLOCK.format(i=i, input=x, output=y) for i, (x, y) in enumerate(shown_pairs))
    return SOLVER_CODE_F.format(input_output_pairs=pairs, message=message)
