"""kernelwright.agents — see DESIGN.md; not built yet."""
