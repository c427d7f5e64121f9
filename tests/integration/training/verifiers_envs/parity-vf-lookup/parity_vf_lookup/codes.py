"""The table the tool reads and the rewards check: a word's code."""

CODES = {
    "apple": "A-17", "river": "R-42", "cloud": "C-08", "stone": "S-93", "maple": "M-25",
    "ember": "E-61", "delta": "D-34", "flint": "F-76", "grove": "G-19", "haven": "H-50",
}  # fmt: skip
