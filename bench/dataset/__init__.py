"""Real training data for both engines: text -> GPT-2 BPE -> Megatron's indexed ``.bin/.idx``.

``python -m bench data`` (``nox -s data``): ``gpt2`` loads the tokenizer from the user's
vocab/merges files, ``indexed`` writes the format megatron-core and Megatron-DeepSpeed both read,
``prepare`` reads the user's text, names the output by a hash of its inputs and shows progress.
"""
