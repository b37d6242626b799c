"""The augmenter registry: a spec class per method, viewmill's own and plugins' (entry-point
group `viewmill.augmenters`), and `AugmenterSpec`, a recipe's augmenter validated as whichever
spec its `method` names. A spec builds its producer (`make_producer`); producers load no
weights until a batch needs them (see `viewmill.augment.models`). What a method may do (skip
the filters, need NLI links) is read from its class (`augmenter_class`), never from its name.
viewmill's own specs and producers live by family: `translation_augmenters`,
`replacement_augmenters`, `data_augmenters`."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Union

from pydantic import Discriminator, SerializeAsAny, Tag, TypeAdapter, WrapValidator
from viewmill.augment.augmenter_base import (
    NAME,
    AugmenterConfig,
    ProduceContext,
    ProducedView,
    Producer,
    Provenance,
    current_producer,
    sentence_seed,
)
from viewmill.augment.data_augmenters import Entailment, EntailmentProducer, Identity, IdentityProducer
from viewmill.augment.replacement_augmenters import (
    MaskedLM,
    MaskedLMProducer,
    Synonym,
    SynonymProducer,
    replacement_view,
)
from viewmill.augment.translation_augmenters import BackTranslation, Forward, Translating, TranslationProducer
from viewmill.storage.lake import Lake

from viewmill.registry import Registry, RegistryError

# The augmenters' public names: those defined in `augmenter_base` and the family modules stay
# importable from here.
__all__ = [
    "AUGMENTERS",
    "NAME",
    "AugmenterConfig",
    "AugmenterSpec",
    "BackTranslation",
    "Entailment",
    "EntailmentProducer",
    "Forward",
    "Identity",
    "IdentityProducer",
    "MaskedLM",
    "MaskedLMProducer",
    "ProduceContext",
    "ProducedView",
    "Producer",
    "Provenance",
    "Synonym",
    "SynonymProducer",
    "Translating",
    "TranslationProducer",
    "augmenter_class",
    "make_producer",
    "replacement_view",
    "sentence_seed",
]


def _method(value: Any) -> str:
    """The augmenter's method; recipes may leave out `method: backtranslation`."""
    if isinstance(value, dict):
        return value.get("method", "backtranslation")
    return getattr(value, "method", "backtranslation")


def _spec_class(value: object) -> type[AugmenterConfig]:
    if not (isinstance(value, type) and issubclass(value, AugmenterConfig)):
        raise RegistryError(f"an augmenter entry must be a subclass of AugmenterConfig, not {value!r}")
    return value


AUGMENTERS: Registry[type[AugmenterConfig]] = Registry(
    "viewmill.augmenters",
    "augmenter method",
    {
        "backtranslation": "viewmill.augment.translation_augmenters:BackTranslation",
        "forward": "viewmill.augment.translation_augmenters:Forward",
        "identity": "viewmill.augment.data_augmenters:Identity",
        "synonym": "viewmill.augment.replacement_augmenters:Synonym",
        "mlm": "viewmill.augment.replacement_augmenters:MaskedLM",
        "entailment": "viewmill.augment.data_augmenters:Entailment",
    },
    check=_spec_class,
)


def _spec_adapter() -> TypeAdapter:
    """A tagged union of every registered spec class, looked up when a recipe is validated
    (so plugins installed since import count)."""
    classes = {}
    for method in AUGMENTERS.names():
        cls = AUGMENTERS.get(method)
        if cls.model_fields["method"].default != method:
            raise RegistryError(f"augmenter '{method}' ({cls.__name__}) must declare method: Literal['{method}']")
        classes[method] = cls
    return _adapter_for(tuple(classes.items()))


@lru_cache(maxsize=16)
def _adapter_for(classes: tuple[tuple[str, type[AugmenterConfig]], ...]) -> TypeAdapter:
    members = [Annotated[cls, Tag(method)] for method, cls in classes]
    return TypeAdapter(
        Annotated[
            Union[tuple(members)],  # noqa: UP007 - built at run time from the registry
            Discriminator(
                _method,
                custom_error_type="unknown_method",
                custom_error_message=f"method must be one of {', '.join(method for method, _ in classes)}",
            ),
        ]
    )


def _validate_spec(value: Any, handler: Any) -> AugmenterConfig:
    if isinstance(value, AugmenterConfig):
        return value
    try:
        adapter = _spec_adapter()
        method = _method(value)
        if isinstance(method, str) and method not in AUGMENTERS:  # named with a "did you mean"
            raise RegistryError(AUGMENTERS.unknown(method))
    except RegistryError as exc:
        raise ValueError(str(exc)) from None
    return adapter.validate_python(value)


# A recipe's augmenter: whichever registered spec its `method` names (default backtranslation).
AugmenterSpec = Annotated[SerializeAsAny[AugmenterConfig], WrapValidator(_validate_spec)]


def make_producer(spec: AugmenterConfig, lake: Lake | None = None) -> Producer:
    """The producer for a spec; `lake` lets data-derived augmenters (entailment) fingerprint their inputs.
    A plugin producer with the old produce(lake, chunk, run_id, stats) is adapted (with a warning)."""
    return current_producer(spec.producer(lake), spec.method)


def augmenter_class(method: str) -> type[AugmenterConfig]:
    """The registered spec class of `method`, whose class variables say what it may do. Views
    of a method no longer installed (a removed plugin's, read back by a report) get the base's
    defaults: filtered, not a copy of the source, no NLI links."""
    if method not in AUGMENTERS:
        return AugmenterConfig
    return AUGMENTERS.get(method)
