"""kernelwright: make GPU kernels faster, judged by a verifier nothing can fool."""
__version__ = "0.1.0"
