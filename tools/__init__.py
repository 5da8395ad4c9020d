"""kernelwright.tools — see DESIGN.md; not built yet."""
