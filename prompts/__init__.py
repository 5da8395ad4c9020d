"""kernelwright.prompts — see DESIGN.md; not built yet."""
