"""Words that agree with their numbers, for pages, messages and e-mails."""


def count(number, word: str, plural: str = "") -> str:
    """ "1 GPU", "12 GPUs", "1 MIG slice"; `plural` for words that do not take an s."""
    return f"{number} {word if number == 1 else plural or word + 's'}"
