"""kernelwright.graphs — see DESIGN.md; not built yet."""
