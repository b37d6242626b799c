"""viewmill: augmented view pairs for sentence-embedding learning.

The four layers live in the repository's top-level folders and install under this
namespace: `viewmill.storage` (the lake), `viewmill.augment` (ingest, engines, views),
`viewmill.train` (objectives, training, evaluation) and `viewmill.pipelines` (Prefect
flows and the CLI). Lower layers never import higher ones.
"""

__version__ = "0.2.0"
