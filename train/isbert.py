"""IS-BERT (Zhang et al., 2020) and its export (the CNN's own code travels with the model); its
settings and registry entry are torch-free (`objective_options`, `objective_catalog`)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from viewmill.train import modeling_isbert
from viewmill.train.encoder import CNN_REF, MODELING_FILE
from viewmill.train.pooling import mean_pool


def jsd_mi_loss(global_: torch.Tensor, local: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative Jensen-Shannon MI estimate between each sentence and its own tokens
    (positives) against the tokens of the other sentences in the batch (negatives).

    global_: (n, d); local: (n, T, d); mask: (n, T) of real tokens.
    """
    n = global_.shape[0]
    scores = torch.einsum("id,jtd->ijt", global_, local)  # discriminator: dot product
    valid = mask.bool().unsqueeze(0).expand(n, -1, -1)
    same = torch.eye(n, dtype=torch.bool, device=scores.device).unsqueeze(-1)
    positive, negative = valid & same, valid & ~same
    log2 = math.log(2.0)
    e_pos = (log2 - F.softplus(-scores))[positive].mean()
    e_neg = (F.softplus(-scores) + scores - log2)[negative].mean()
    return e_neg - e_pos


class ISBERT(nn.Module):
    """CNN n-gram features over the encoder's tokens, the sentence as their mean over time,
    trained to maximise JSD mutual information between a sentence and its own n-grams. Reads
    view a only: a sentence's other view in the same batch would be a near-duplicate negative."""

    def __init__(self, encoder: nn.Module, dim: int, filters: int = 256, windows: tuple[int, ...] = (1, 3, 5)) -> None:
        super().__init__()
        self.encoder = encoder
        self.cnn = modeling_isbert.ReLUCNN(dim, filters, windows)

    def local_features(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        tokens = self.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        return self.cnn({"token_embeddings": tokens, "attention_mask": batch["attention_mask"]})["token_embeddings"]

    def sentence_embedding(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The sentence vector training shapes: the mean of the n-gram features over real tokens."""
        return mean_pool(self.local_features(batch), batch["attention_mask"])

    def loss(self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True) -> torch.Tensor:
        mask = batch["attention_mask"][:n]
        with torch.set_grad_enabled(train_encoder and torch.is_grad_enabled()):
            tokens = self.encoder(input_ids=batch["input_ids"][:n], attention_mask=mask).last_hidden_state
        local = self.cnn({"token_embeddings": tokens, "attention_mask": mask})["token_embeddings"]
        return jsd_mi_loss(mean_pool(local, mask), local, mask)

    forward = loss

    def head_parameters(self) -> list[nn.Parameter]:
        return list(self.cnn.parameters())


def build(config, sentence_model) -> tuple[nn.Module, list[nn.Module]]:
    """IS-BERT over the base model, exported as encoder + CNN + mean pooling of its features."""
    from sentence_transformers.sentence_transformer.modules import Pooling

    options = config.objective_options
    transformer = sentence_model[0]
    model = ISBERT(transformer.auto_model, sentence_model.get_embedding_dimension(), options.filters, options.windows)
    return model, [transformer, model.cnn, Pooling(model.cnn.get_sentence_embedding_dimension(), "mean")]


def carry_modeling_file(folder: Path) -> None:
    """Copy the CNN's module file into the model and point modules.json at it."""
    shutil.copyfile(modeling_isbert.__file__, folder / MODELING_FILE)
    modules_path = folder / "modules.json"
    modules = json.loads(modules_path.read_text(encoding="utf-8"))
    for module in modules:
        if module["type"].endswith("modeling_isbert.ReLUCNN"):
            module["type"] = CNN_REF
    modules_path.write_text(json.dumps(modules, indent=2), encoding="utf-8")
