"""Broken and valid problem files, shared by the problem tests (tests/evaluators/test_problem.py) and the
CLI's (tests/kernelwright/test_cli.py): each broken case with the words its one-sentence error must say."""

from __future__ import annotations

from pathlib import Path

HEAD = "import torch\nfrom torch import nn\n\n"
MODEL = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
INPUTS = "def get_inputs():\n    return [torch.randn(16, 33)]\n\n"
INIT = "def get_init_inputs():\n    return []\n\n"
VALID = HEAD + MODEL + INPUTS + INIT


def model_source(body: str, init: str = "") -> str:
    return f"class Model(nn.Module):\n{init}    def forward(self, x):\n        {body}\n\n"


# name -> (source, what the sentence must say). Defects found while the file is loaded:
LOAD_BROKEN: dict[str, tuple[str, str]] = {
    "syntax_error": (HEAD + "def get_inputs(:\n    pass\n" + MODEL + INIT, "line 4: syntax error"),
    "import_error": ("import torch\nimport kw_no_such_module_xyz\nfrom torch import nn\n" + MODEL + INPUTS + INIT,
                     "could not be imported: ModuleNotFoundError: No module named 'kw_no_such_module_xyz'"),
    "raises_on_import": (HEAD + "raise RuntimeError('needs a dataset')\n" + MODEL + INPUTS + INIT,
                         "could not be imported: RuntimeError: needs a dataset"),
    "no_model": (HEAD + INPUTS + INIT, "defines no class Model(nn.Module)"),
    "model_not_a_module": (HEAD + "class Model:\n    def forward(self, x):\n        return x\n\n" + INPUTS + INIT,
                           "defines no class Model(nn.Module)"),
    "model_is_an_instance": (HEAD + MODEL.replace("class Model(", "class _M(") + "Model = _M()\n" + INPUTS + INIT,
                             "defines no class Model(nn.Module)"),
    "no_get_inputs": (HEAD + MODEL + INIT, "defines no function get_inputs()"),
    "no_get_init_inputs": (HEAD + MODEL + INPUTS, "defines no function get_init_inputs()"),
    "get_inputs_not_callable": (HEAD + MODEL + "get_inputs = [1, 2]\n" + INIT, "defines no function get_inputs()"),
    "unknown_precision": (VALID + "PRECISION = 'fp8'\n", "unknown precision 'fp8' (use one of fp32, tf32, bf16, fp16)"),
    "precision_not_a_string": (VALID + "PRECISION = 16\n", "unknown precision 16"),
    "tolerance_a_string": (VALID + "TOLERANCE = 'loose'\n", "TOLERANCE must be a number between 0 and 1, not 'loose'"),
    "tolerance_too_big": (VALID + "TOLERANCE = 5\n", "TOLERANCE must be a number between 0 and 1, not 5"),
    "tolerance_zero": (VALID + "TOLERANCE = 0\n", "TOLERANCE must be a number between 0 and 1, not 0"),
    "tolerance_negative": (VALID + "TOLERANCE = -1e-3\n", "TOLERANCE must be a number between 0 and 1"),
    "tolerance_nan": (VALID + "TOLERANCE = float('nan')\n", "TOLERANCE must be a number between 0 and 1, not nan"),
    "tolerance_a_list": (VALID + "TOLERANCE = [1e-3]\n", "TOLERANCE must be a number between 0 and 1, not [0.001]"),
}

# Defects that show only when the reference first runs (building the Model or drawing inputs):
RUN_BROKEN: dict[str, tuple[str, str]] = {
    "get_inputs_raises": (HEAD + MODEL + "def get_inputs():\n    raise ValueError('no inputs today')\n\n" + INIT,
                          "get_inputs() raised ValueError: no inputs today"),
    "get_inputs_multiline_error": (
        HEAD + MODEL + "def get_inputs():\n    raise ValueError('first line\\nsecond line')\n\n" + INIT,
        "get_inputs() raised ValueError: first line"),
    "get_inputs_not_a_list": (HEAD + MODEL + "def get_inputs():\n    return torch.randn(16)\n\n" + INIT,
                              "get_inputs() must return a list, not Tensor"),
    "get_inputs_returns_none": (HEAD + MODEL + "def get_inputs():\n    pass\n\n" + INIT,
                                "get_inputs() must return a list, not NoneType"),
    "get_init_inputs_raises": (HEAD + MODEL + INPUTS + "def get_init_inputs():\n    raise KeyError('cfg')\n\n",
                               "get_init_inputs() raised KeyError: 'cfg'"),
    "init_raises": (HEAD + model_source("return x", "    def __init__(self):\n        super().__init__()\n"
                                  "        raise RuntimeError('cannot build')\n\n") + INPUTS + INIT,
                    "Model(*get_init_inputs()) raised RuntimeError: cannot build"),
    "init_wrong_arguments": (HEAD + model_source("return x", "    def __init__(self, width):\n        super().__init__()\n\n")
                             + INPUTS + INIT, "Model(*get_init_inputs()) raised TypeError"),
    "forward_raises": (HEAD + model_source("raise KeyError('boom')") + INPUTS + INIT, "Model.forward raised KeyError: 'boom'"),
    "forward_returns_float": (HEAD + model_source("return float(x.sum())") + INPUTS + INIT,
                              "Model.forward returned a float (output 0), not a tensor"),
    "forward_returns_dict": (HEAD + model_source("return {'y': x * 2}") + INPUTS + INIT,
                             "Model.forward returned a dict (output 0), not a tensor"),
    "forward_returns_none": (HEAD + model_source("return None") + INPUTS + INIT,
                             "Model.forward returned a NoneType (output 0), not a tensor"),
    "forward_second_output_not_a_tensor": (HEAD + model_source("return x * 2, 'done'") + INPUTS + INIT,
                                           "Model.forward returned a str (output 1), not a tensor"),
    "reference_nan": (HEAD + model_source("return x * float('nan')") + INPUTS + INIT,
                      "the reference output is NaN or Inf on the problem's own inputs"),
    "reference_inf": (HEAD + model_source("return x / 0.0 + float('inf')") + INPUTS + INIT,
                      "the reference output is NaN or Inf on the problem's own inputs"),
    "get_test_inputs_raises": (VALID + "def get_test_inputs():\n    raise IndexError('shape table missing')\n",
                               "get_test_inputs() raised IndexError: shape table missing"),
}
BROKEN = {**LOAD_BROKEN, **RUN_BROKEN}
# One of each kind of defect also goes through `kernelwright eval` (a subprocess each, so not all of them).
CLI_BROKEN = ["syntax_error", "import_error", "no_model", "model_not_a_module", "no_get_inputs", "no_get_init_inputs",
              "unknown_precision", "tolerance_a_string", "get_inputs_raises", "get_inputs_multiline_error",
              "get_inputs_not_a_list", "init_raises", "forward_raises", "forward_returns_float",
              "forward_returns_dict", "reference_nan"]


def write_problem(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


def assert_one_sentence(message: str, path: Path, says: str) -> None:
    assert "\n" not in message, f"more than one line: {message!r}"
    assert str(path) in message, f"does not name the file: {message!r}"
    assert says in message, f"does not say {says!r}: {message!r}"
    assert len(message) < 400 and "Traceback" not in message
