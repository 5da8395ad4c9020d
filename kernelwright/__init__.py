"""kernelwright: make GPU kernels faster, judged by a verifier nothing can fool.

Installed, the top-level folders of the repository (evaluators/, tools/, agents/, graphs/, prompts/)
are subpackages of `kernelwright`. Run from a source checkout (the repository root on sys.path, as
`python -m pytest` does), they are found beside this folder instead.
"""

import os as _os

__version__ = "0.1.0"

_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "evaluators")) and _os.path.isfile(
    _os.path.join(_root, "evaluators", "__init__.py")
):
    __path__.append(_root)  # type: ignore[name-defined]  # noqa: F821
