"""The public evaluation and training data sets viewmill's recipes and suites read.

Every source is the data set's public origin (official archive, or the repository the
community's copies come from). No checksum here is known in advance: the files in
../shared/data are extracted copies, never the archives themselves, so their hashes say
nothing about the archives. `sha256=None` therefore means trust on first use: the first
download's sha256 is recorded in the data directory's lock file and every later
download must match it (storage/datasets/fetching.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Source:
    """One file to download. `members` maps an archive path prefix (or, for a plain file,
    "") to a destination path inside the data set's folder; `rename` holds (old, new)
    substrings applied to destination file names."""

    url: str
    members: tuple[tuple[str, str], ...]
    sha256: str | None = None
    rename: tuple[tuple[str, str], ...] = ()

    @property
    def kind(self) -> str:
        name = self.url.rsplit("/", 1)[-1].lower()
        if name.endswith(".zip"):
            return "zip"
        return "tar" if name.endswith((".tar.gz", ".tgz", ".tar")) else "file"


@dataclass(frozen=True)
class Dataset:
    name: str
    folder: str  # inside the data directory; the same name as in ../shared/data where that has it
    description: str
    licence: str
    sources: tuple[Source, ...]
    transform: str | None = None  # a conversion in storage/datasets/fetching.py run after unpacking
    notes: tuple[str, ...] = field(default=())


STSWIKI = "http://ixa2.si.ehu.es/stswiki/images"
SENTEVAL = "https://dl.fbaipublicfiles.com/senteval/senteval_data"
STS_TERMS = "SemEval STS organisers' terms (research use); each sentence keeps its source's terms"


def _sts_year(year: int, path: str, subdir: str, rename: tuple[tuple[str, str], ...] = ()) -> Dataset:
    return Dataset(
        name=f"sts{year - 2000}",
        folder=f"senteval_sts/STS{year - 2000}-en-test",
        description=f"STS {year} English test sets in SentEval's layout (STS.input.X.txt, STS.gs.X.txt)",
        licence=STS_TERMS,
        sources=(Source(f"{STSWIKI}/{path}/STS{year}-en-test.zip", ((f"{subdir}/", ""),), rename=rename),),
    )


DATASETS: tuple[Dataset, ...] = (
    _sts_year(2012, "4/40", "test-gold"),
    _sts_year(2013, "2/2f", "test-gs"),
    _sts_year(2014, "8/8c", "sts-en-test-gs-2014"),
    _sts_year(2015, "d/da", "test_evaluation_task2a"),
    _sts_year(2016, "9/98", "sts2016-english-with-gs-v1.0", rename=(("STS2016.", "STS."),)),
    Dataset(
        name="stsb",
        folder="stsbenchmark",
        description="STS Benchmark v2017: sts-train/dev/test.csv (5,749 / 1,500 / 1,379 pairs)",
        licence="scores CC BY-SA 4.0; sentence texts keep their sources' terms (LICENSE.txt in the archive)",
        sources=(Source(f"{STSWIKI}/4/48/Stsbenchmark.tar.gz", (("stsbenchmark/", ""),)),),
    ),
    Dataset(
        name="sick",
        folder="sick",
        description="SICK 2014 train, trial and test with relatedness scores (SentEval's SICK-R: the test file)",
        licence="CC BY-NC-SA 3.0",
        sources=tuple(
            Source(
                f"http://alt.qcri.org/semeval2014/task1/data/uploads/sick_{split}.zip",
                ((f"SICK_{split}.txt", f"SICK_{split}.txt"), ("readme.txt", "readme.txt")),
            )
            for split in ("train", "trial", "test_annotated")
        ),
    ),
    Dataset(
        name="senteval-transfer",
        folder="senteval_classification",
        description="SentEval transfer sets MR, CR, SUBJ, MPQA, SST (2 and 5 classes), TREC, MRPC in SentEval's layout",
        licence="research corpora with mixed terms (see each source); MRPC under Microsoft's research data licence",
        sources=(
            Source(
                f"{SENTEVAL}/datasmall_NB_ACL12.zip",
                (
                    ("data/rt10662/rt-polarity.", "MR/rt-polarity."),
                    ("data/customerr/custrev.", "CR/custrev."),
                    ("data/subj/subj.", "SUBJ/subj."),
                    ("data/mpqa/mpqa.", "MPQA/mpqa."),
                ),
            ),
            *(
                Source(
                    f"https://raw.githubusercontent.com/PrincetonML/SIF/master/data/sentiment-{split}",
                    (("", f"SST/binary/sentiment-{split}"),),
                )
                for split in ("train", "dev", "test")
            ),
            *(
                Source(
                    "https://raw.githubusercontent.com/AcademiaSinicaNLPLab/sentiment_dataset/master/data/"
                    f"stsa.fine.{split}",
                    (("", f"SST/fine/sentiment-{split}"),),
                )
                for split in ("train", "dev", "test")
            ),
            *(
                Source(f"https://cogcomp.seas.upenn.edu/Data/QA/QC/{name}", (("", f"TREC/{name}"),))
                for name in ("train_5500.label", "TREC_10.label")
            ),
            *(
                Source(f"{SENTEVAL}/msr_paraphrase_{split}.txt", (("", f"MRPC/msr_paraphrase_{split}.txt"),))
                for split in ("train", "test")
            ),
        ),
        notes=(
            "the sources' own text: SentEval's download script also PTB-tokenises MR, CR, SUBJ, MPQA and "
            "strips quotes from TREC, so accuracies can differ slightly from SentEval's tokenised copies",
        ),
    ),
    Dataset(
        name="snli",
        folder="snli_senteval",
        description="SNLI 1.0 train, dev and test converted to SentEval's layout (s1.*, s2.*, labels.*; pairs "
        "without a gold label dropped, as SentEval does)",
        licence="CC BY-SA 4.0",
        sources=(
            Source(
                "https://nlp.stanford.edu/projects/snli/snli_1.0.zip",
                tuple((f"snli_1.0/snli_1.0_{split}.txt", f"raw/{split}.txt") for split in ("train", "dev", "test")),
            ),
        ),
        transform="snli_senteval",
        notes=(
            "sentences are SNLI's original text (SentEval's copies are PTB-tokenised; detokenize: true is "
            "harmless on either)",
        ),
    ),
    Dataset(
        name="sts17",
        folder="sts17",
        description="SemEval-2017 Task 1 (STS 2017) evaluation inputs and gold scores, one file per track",
        licence=STS_TERMS,
        sources=(
            Source(
                "http://alt.qcri.org/semeval2017/task1/data/uploads/sts2017.eval.v1.1.zip",
                (("STS2017.eval.v1.1/", ""),),
            ),
            Source("http://alt.qcri.org/semeval2017/task1/data/uploads/sts2017.gs.zip", (("STS2017.gs/", ""),)),
        ),
        notes=(
            "track 6 (tr-en) ships 500 input lines for 250 gold scores: the evaluator skips it with that "
            "reason unless gold_alignment: first-lines is set (train/evaluation/sts_formats.py)",
        ),
    ),
    Dataset(
        name="stsb-multi-mt",
        folder="stsb_multi_mt",
        description="STS Benchmark machine-translated (DeepL) into de es fr it ja nl pl pt ru zh, plus en",
        licence="as STS Benchmark (scores CC BY-SA 4.0)",
        sources=tuple(
            Source(
                "https://raw.githubusercontent.com/PhilipMay/stsb-multi-mt/"
                f"30de0dec4ee199b7f42351d3f1a0b19592955385/data/stsb-{lang}-{split}.csv",
                (("", f"stsb-{lang}-{split}.csv"),),
            )
            for lang in ("en", "de", "es", "fr", "it", "ja", "nl", "pl", "pt", "ru", "zh")
            for split in ("train", "dev", "test")
        ),
    ),
)

BY_NAME = {dataset.name: dataset for dataset in DATASETS}
# A data set answers to its folder's name too, as recipes write it (data:stsb_multi_mt/...,
# data:stsbenchmark/...): `viewmill data fetch stsb_multi_mt stsbenchmark` fetches stsb-multi-mt and stsb.
BY_FOLDER = {dataset.folder: dataset for dataset in DATASETS if dataset.folder != dataset.name}


def lookup(name: str) -> Dataset | None:
    """The data set called `name`, or whose folder is `name`; None when there is none."""
    return BY_NAME.get(name) or BY_FOLDER.get(name)
