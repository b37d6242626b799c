"""IS-BERT's CNN as models exported before viewmill 0.2 stored it (cnn.pt, cnn_config.json;
modules.json names `train.objectives.ReLUCNN`). Kept so those models still load."""

from __future__ import annotations

import json
import os

import torch
from viewmill.train import modeling_isbert


class ReLUCNN(modeling_isbert.ReLUCNN):
    """IS-BERT's CNN in the format of models exported before they carried their own
    modeling file (cnn.pt; modules.json names `train.objectives.ReLUCNN` or this class).
    Kept so those models still load through `load_sentence_model`; new exports use
    `modeling_isbert.ReLUCNN`."""

    def save(self, output_path: str, *args, **kwargs) -> None:
        with open(os.path.join(output_path, "cnn_config.json"), "w") as handle:
            json.dump({"in_dim": self.in_dim, "filters": self.filters, "windows": list(self.windows)}, handle)
        torch.save(self.state_dict(), os.path.join(output_path, "cnn.pt"))

    @classmethod
    def load(cls, input_path: str, *args, subfolder: str = "", **kwargs) -> ReLUCNN:
        input_path = os.path.join(input_path, subfolder)  # sentence-transformers >= 5 passes the module's folder apart
        with open(os.path.join(input_path, "cnn_config.json")) as handle:
            module = cls(**json.load(handle))
        module.load_state_dict(torch.load(os.path.join(input_path, "cnn.pt"), map_location="cpu", weights_only=True))
        return module
