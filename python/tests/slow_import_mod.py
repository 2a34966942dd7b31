"""A module that takes half a second to import: its functions' first call in a fresh
worker spends that loading them, which TVM does not count against the timeout."""

import sys
import time

time.sleep(0.5)


def identity(x):
    return x


def exit_now(code):
    sys.exit(code)
