"""IS-BERT's n-gram encoder as a sentence-transformers module.

This file is self-contained (torch, safetensors and the standard library only): an
exported IS-BERT model carries a copy of it, referenced in modules.json as
`modeling_isbert.ReLUCNN`, so the model loads with `trust_remote_code=True` wherever
sentence-transformers is installed, without viewmill. Training uses this very class.
"""

from __future__ import annotations

import json
import os

import torch
from safetensors.torch import load_file, save_file
from torch import nn

CONFIG_NAME = "cnn_config.json"
WEIGHTS_NAME = "model.safetensors"


class ReLUCNN(nn.Module):
    """Parallel 1-D convolutions (same padding) over token embeddings, ReLU, concatenated.

    Padded positions are zeroed before the convolutions and in the output, so a token's
    features never depend on how much padding its batch added: an embedding is the same
    whichever sentences share its batch.
    """

    def __init__(self, in_dim: int, filters: int = 256, windows: tuple[int, ...] = (1, 3, 5)) -> None:
        super().__init__()
        self.in_dim, self.filters, self.windows = in_dim, filters, tuple(windows)
        self.convs = nn.ModuleList(nn.Conv1d(in_dim, filters, w, padding=w // 2) for w in self.windows)

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        tokens = features["token_embeddings"]
        mask = features.get("attention_mask")
        keep = None if mask is None else mask.unsqueeze(-1).to(tokens.dtype)
        if keep is not None:
            tokens = tokens * keep  # a [PAD] position reads as the zero padding past the sequence end
        local = torch.cat([torch.relu(conv(tokens.transpose(1, 2))) for conv in self.convs], dim=1).transpose(1, 2)
        features["token_embeddings"] = local if keep is None else local * keep
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return self.filters * len(self.windows)

    get_embedding_dimension = get_sentence_embedding_dimension

    def save(self, output_path: str, *args, **kwargs) -> None:
        with open(os.path.join(output_path, CONFIG_NAME), "w", encoding="utf-8") as handle:
            json.dump({"in_dim": self.in_dim, "filters": self.filters, "windows": list(self.windows)}, handle)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, os.path.join(output_path, WEIGHTS_NAME))

    @classmethod
    def load(cls, input_path: str, *args, subfolder: str = "", **kwargs) -> ReLUCNN:
        folder = os.path.join(input_path, subfolder)  # sentence-transformers >= 5 passes the module's folder apart
        with open(os.path.join(folder, CONFIG_NAME), encoding="utf-8") as handle:
            module = cls(**json.load(handle))
        module.load_state_dict(load_file(os.path.join(folder, WEIGHTS_NAME)))
        return module
