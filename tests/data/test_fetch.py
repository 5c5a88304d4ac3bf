import shutil

import fetch_data  # noqa: E402
import pytest
import yaml
from conftest import FIXTURE_MIRROR, REPO, fixture_manifest

from minisci.data.fetch import ManifestEntry, fetch_all, manifest_from_shared, read_manifest, write_manifest
from minisci.errors import FetchError, MinisciError
from minisci.io import sha256_file
from minisci.stage import run_stage


def test_copies_and_verifies_every_file(tmp_path):
    entries = fixture_manifest(tmp_path / "m.tsv")
    stats = fetch_all(read_manifest(tmp_path / "m.tsv"), FIXTURE_MIRROR, tmp_path / "raw")
    assert stats["files"] == len(entries)
    for e in entries:
        assert sha256_file(tmp_path / "raw" / e.path) == e.sha256


def test_checksum_mismatch_names_file_and_leaves_nothing(tmp_path):
    entries = fixture_manifest(tmp_path / "m.tsv")
    bad = [entries[0]] + [ManifestEntry(entries[1].path, entries[1].bytes, "0" * 64, "")] + entries[2:]
    with pytest.raises(
        FetchError, match=rf"{entries[1].path}: sha256 mismatch \(from mirror .*/{entries[1].path}\): expected 0000"
    ):
        fetch_all(bad, FIXTURE_MIRROR, tmp_path / "raw")
    assert list(tmp_path.iterdir()) == [tmp_path / "m.tsv"]  # no partial output, no temp dir


def test_missing_file_without_url_is_a_clear_error(tmp_path):
    e = ManifestEntry("ner/none/test.txt", 1, "0" * 64, "")
    with pytest.raises(
        FetchError, match=r"^ner/none/test.txt: not in mirror .*\(minisci reads data only from a local mirror\)$"
    ):
        fetch_all([e], FIXTURE_MIRROR, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()


def test_never_downloads_a_file_the_mirror_lacks(tmp_path):
    """A file with a public URL but not in the mirror is an error naming the URL, not a download
    (the stages run offline); the URL here is a reachable file:// one, so a download would succeed."""
    src = FIXTURE_MIRROR / "ner/bc5cdr/test.txt"
    e = ManifestEntry("ner/bc5cdr/test.txt", src.stat().st_size, sha256_file(src), src.as_uri())
    (tmp_path / "empty-mirror").mkdir()
    with pytest.raises(FetchError, match=rf"ner/bc5cdr/test.txt: not in mirror .*published at {src.as_uri()}"):
        fetch_all([e], tmp_path / "empty-mirror", tmp_path / "raw")
    assert not (tmp_path / "raw").exists()
    with pytest.raises(FetchError, match="ner/bc5cdr/test.txt: no mirror configured"):
        fetch_all([e], None, tmp_path / "raw")


def test_malformed_manifest(tmp_path):
    p = tmp_path / "m.tsv"
    p.write_text("path\tbytes\tsha256\turl\nner/x.txt\tten\tabc\t\n")
    with pytest.raises(FetchError, match=r"m.tsv:2: expected path<TAB>bytes<TAB>sha256<TAB>url"):
        read_manifest(p)
    p.write_text("path\tbytes\tsha256\turl\n../escape.txt\t1\t" + "0" * 64 + "\t\n")
    with pytest.raises(FetchError, match="m.tsv:2: path must be relative"):
        read_manifest(p)


def test_committed_manifest_is_derived_from_the_shared_one(shared_data, tmp_path):
    write_manifest(manifest_from_shared(shared_data / "MANIFEST.tsv"), tmp_path / "m.tsv")
    assert (tmp_path / "m.tsv").read_text() == (REPO / "data/manifest.tsv").read_text()
    by_path = {e.path: e for e in read_manifest(REPO / "data/manifest.tsv")}
    assert by_path["corpus/biomedical.jsonl"].url == ""  # derived from many sources: mirror only
    assert by_path["ner/bc5cdr/test.txt"].url.endswith("/data/ner/bc5cdr/test.txt")


def test_stage_env_override_and_exit_code(tmp_path, monkeypatch, capsys):
    fixture_manifest(tmp_path / "m.tsv")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"fetch_data": {"mirror": str(tmp_path / "nowhere")}}))
    argv = ["--manifest", str(tmp_path / "m.tsv"), "--out", str(tmp_path / "raw"), "--params", str(params)]
    assert run_stage(fetch_data.main, argv) == 1
    assert "error: " in capsys.readouterr().err and not (tmp_path / "raw").exists()
    monkeypatch.setenv(fetch_data.ENV_MIRROR, str(FIXTURE_MIRROR))
    assert run_stage(fetch_data.main, argv) == 0
    shutil.rmtree(tmp_path / "raw")


def test_a_relative_mirror_is_taken_from_the_repository_root(tmp_path, monkeypatch):
    """Under `dvc exp run --temp` or `--queue` the stage runs in a temporary workspace elsewhere, and
    DVC_ROOT names the repository: `../shared/data` must still find the mirror beside it."""
    root, workspace = tmp_path / "checkout" / "repo", tmp_path / "elsewhere" / "exp"
    workspace.mkdir(parents=True)
    root.mkdir(parents=True)
    shutil.copytree(FIXTURE_MIRROR, tmp_path / "checkout" / "mirror")
    fixture_manifest(workspace / "m.tsv")
    (workspace / "params.yaml").write_text(yaml.safe_dump({"fetch_data": {"mirror": "../mirror"}}))
    monkeypatch.chdir(workspace)
    monkeypatch.delenv(fetch_data.ENV_MIRROR, raising=False)
    monkeypatch.setenv("DVC_ROOT", str(root))
    assert run_stage(fetch_data.main, ["--manifest", "m.tsv", "--out", "raw"]) == 0
    assert sorted(p.name for p in (workspace / "raw").rglob("*") if p.is_file())


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_mirror_that_is_missing_or_a_file_names_the_option(tmp_path, kind):
    entries = fixture_manifest(tmp_path / "m.tsv")
    mirror = tmp_path / "mirror"
    if kind == "file":
        mirror.write_text("not a directory")
    match = "does not exist" if kind == "missing" else "is not a directory"
    with pytest.raises(FetchError, match=rf"^fetch_data.mirror: mirror (directory )?{mirror} {match}"):
        fetch_all(entries, mirror, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()


def test_stage_error_names_the_env_variable_when_it_set_the_mirror(tmp_path, monkeypatch, capsys):
    fixture_manifest(tmp_path / "m.tsv")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"fetch_data": {"mirror": str(FIXTURE_MIRROR)}}))
    monkeypatch.setenv(fetch_data.ENV_MIRROR, str(tmp_path / "gone"))
    argv = ["--manifest", str(tmp_path / "m.tsv"), "--out", str(tmp_path / "raw"), "--params", str(params)]
    assert run_stage(fetch_data.main, argv) == 1
    assert (
        capsys.readouterr().err
        == f"error: {fetch_data.ENV_MIRROR}: mirror directory {tmp_path / 'gone'} does not exist\n"
    )


def test_size_mismatch_names_the_file(tmp_path):
    entries = fixture_manifest(tmp_path / "m.tsv")
    bad = [ManifestEntry(entries[0].path, entries[0].bytes + 1, entries[0].sha256, "")]
    with pytest.raises(FetchError, match=rf"{entries[0].path}: size mismatch \(from mirror .*\): manifest says"):
        fetch_all(bad, FIXTURE_MIRROR, tmp_path / "raw")
    assert list(tmp_path.iterdir()) == [tmp_path / "m.tsv"]


def test_manifest_that_is_not_utf8_names_line_and_offset(tmp_path):
    p = tmp_path / "m.tsv"
    p.write_bytes(b"path\tbytes\tsha256\turl\nner/caf\xe9.txt\t1\t" + b"0" * 64 + b"\t\n")
    with pytest.raises(MinisciError, match=r"m.tsv:2: not UTF-8: byte 0xe9 at byte offset 29"):
        read_manifest(p)


def test_rerun_replaces_its_own_output_but_not_a_users_directory(tmp_path):
    entries = fixture_manifest(tmp_path / "m.tsv")
    fetch_all(entries, FIXTURE_MIRROR, tmp_path / "raw")
    fetch_all(entries, FIXTURE_MIRROR, tmp_path / "raw")  # our own earlier output: replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine/notes.txt").write_text("keep")
    with pytest.raises(MinisciError, match="mine: exists and is not an earlier minisci output"):
        fetch_all(entries, FIXTURE_MIRROR, tmp_path / "mine")
    assert (tmp_path / "mine/notes.txt").read_text() == "keep"


def test_manifest_listing_a_path_twice_warns_or_fails(tmp_path, capsys):
    fixture_manifest(tmp_path / "m.tsv")
    lines = (tmp_path / "m.tsv").read_text().splitlines(keepends=True)
    (tmp_path / "m.tsv").write_text("".join(lines + [lines[1]]))
    warnings = []
    entries = read_manifest(tmp_path / "m.tsv", warnings)
    assert len(entries) == len(lines) - 1
    path = lines[1].split("\t")[0]
    assert warnings == [f"{tmp_path}/m.tsv:{len(lines) + 1}: {path} is listed again (first on line 2); fetched once"]
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"fetch_data": {"mirror": str(FIXTURE_MIRROR)}}))
    argv = ["--manifest", str(tmp_path / "m.tsv"), "--out", str(tmp_path / "raw"), "--params", str(params)]
    assert run_stage(fetch_data.main, argv) == 0
    out = capsys.readouterr()
    assert out.err == f"warning: {warnings[0]}\n" and "1 repeated manifest line(s) skipped" in out.out
    other = lines[1].split("\t")
    other[2] = "0" * 64
    (tmp_path / "m.tsv").write_text("".join(lines) + "\t".join(other))
    with pytest.raises(FetchError, match=rf"m.tsv:{len(lines) + 1}: {path} is listed on line 2 with another size"):
        read_manifest(tmp_path / "m.tsv")
