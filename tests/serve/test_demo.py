"""``minisci demo``: the page's bad-input messages (Streamlit's headless AppTest), and the page in a
real browser (Selenium driving headless Chromium) on tiny models: NER highlights, search results,
screenshots.

The browser test skips only where Chromium, chromedriver or selenium cannot be found (``.ci/run``
installs them). Screenshots go to the test's temporary folder, or to ``$MINISCI_SCREENSHOTS``
(the README's come from ``MINISCI_SCREENSHOTS=plots/screenshots pytest tests/serve/test_demo.py``).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO

from minisci.errors import MinisciError
from minisci.serve import demo

COLLECTION = [
    {"id": "p1", "title": "Aspirin and heparin", "text": "patients received aspirin after surgery", "authors": ["Ada"]},
    {"id": "p2", "title": "Lung cancer", "text": "lung cancer treatment with cisplatin", "authors": ["Cy", "Ada"]},
    {"id": "p3", "title": "Graph algorithms", "text": "shortest paths in sparse graphs", "authors": ["Dee", "Bob"]},
]
SENTENCE = "Patients received aspirin after treatment with heparin."


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    from minisci import Index

    docs = tmp_path_factory.mktemp("demo") / "docs.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in COLLECTION))
    Index.build(tiny_model_dir, docs, docs.parent / "index", max_length=64)
    return docs.parent / "index"


# 1. what the page checks, without a browser


def test_text_checks():
    assert demo.page_text("  aspirin \n") == "aspirin"
    with pytest.raises(MinisciError, match="Type or paste a text first"):
        demo.page_text(" \n ")
    with pytest.raises(MinisciError, match=r"1,048,576 characters; the page takes at most 100,000\. Use `minisci ner"):
        demo.page_text("x" * 2**20)


def test_entities_are_escaped_and_highlighted():
    text = "<b>aspirin</b> & heparin"
    entities = [{"entity_group": "Chemical", "score": 0.98765, "word": "heparin", "start": 17, "end": 24}]
    out = demo.entity_html(text, entities, demo.entity_colours(["Chemical", "Disease"]))
    assert "&lt;b&gt;aspirin&lt;/b&gt; &amp; " in out and "<b>" not in out
    assert 'data-type="Chemical" title="Chemical · score 0.988"' in out and ">heparin<sub" in out


def test_uploaded_collection_errors_name_the_upload(tiny_model_dir):
    with pytest.raises(MinisciError, match=r"^papers\.jsonl:2: expected an 'id'"):
        demo.index_from_upload(tiny_model_dir, "papers.jsonl", b'{"id": "a", "title": "t"}\n{"title": "x"}\n')
    with pytest.raises(MinisciError, match=r"^papers\.jsonl:1: not UTF-8"):
        demo.index_from_upload(tiny_model_dir, "papers.jsonl", b'{"id": "a", "title": "\xff"}\n')
    index = demo.index_from_upload(tiny_model_dir, "papers.jsonl", b'{"id": "a", "title": "aspirin"}\n', max_length=64)
    assert index.search("aspirin", k=1)[0]["id"] == "a"


def test_demo_command_options(capsys, monkeypatch, tmp_path):
    from minisci.serve import cli

    monkeypatch.chdir(REPO)  # the defaults follow the working directory's params.yaml

    args = cli.build_parser().parse_args(["demo", "--index", "idx", "--port", "9000"])
    assert (args.ner, args.cite, args.embeddings, args.index, args.host, args.port) == (
        "models/finetune_ner/bc5cdr/adapted",
        "models/finetune_classification/scicite/adapted",
        demo.DEFAULT_EMBEDDINGS,
        "idx",
        "127.0.0.1",
        9000,
    )
    assert "--browser.gatherUsageStats=false" in demo.streamlit_flags("127.0.0.1", 9000)
    (tmp_path / "params.yaml").write_text("finetune_ner:\n  datasets: [mine]\n")
    monkeypatch.chdir(tmp_path)
    args = cli.build_parser().parse_args(["demo"])
    assert (args.ner, args.cite) == (
        "models/finetune_ner/mine/adapted",
        "models/finetune_classification/<dataset>/adapted",
    )


def app(monkeypatch, **paths):
    """The page in Streamlit's headless test harness, with ``paths`` as its options."""
    from streamlit.testing.v1 import AppTest

    argv = [str(demo.PAGE)] + [x for k, v in paths.items() for x in (f"--{k}", str(v))]
    monkeypatch.setattr(sys, "argv", argv)
    return AppTest.from_file(str(demo.PAGE), default_timeout=60).run()


def submit(at, form: int, text: str) -> str:
    """Type ``text`` in the ``form``-th form's text area, submit it, and return the page's error messages."""
    at.text_area[form].input(text)
    at.button[form].click()
    return " | ".join(e.value for e in at.run().error)


def test_page_bad_inputs_get_a_message_not_a_crash(monkeypatch, tmp_path, tiny_finetuned, index_dir):
    corrupt = tmp_path / "corrupt"
    shutil.copytree(index_dir, corrupt)
    (corrupt / "embeddings.npy").write_bytes(b"\x93NUMPY garbage")
    at = app(monkeypatch, ner=tmp_path / "missing", cite=tiny_finetuned["ner"], index=corrupt)
    assert not at.exception
    assert "corrupt/embeddings.npy: not a readable NumPy array" in at.error[0].value  # the search tab, at once
    assert "missing: not a model directory" in submit(at, 0, SENTENCE)
    assert "pass a model from the finetune_classification stage" in submit(at, 1, "We used it.")
    at = app(monkeypatch, ner=tiny_finetuned["ner"], index=tmp_path / "nowhere")
    assert "nowhere: no such folder" in at.error[0].value
    assert "Type or paste a text first." in submit(at, 0, "   ")
    assert "the page takes at most 100,000" in submit(at, 0, "aspirin " * 200_000)
    assert not at.exception


def test_a_project_of_one_task_has_no_model_for_the_other_tab(monkeypatch, tmp_path, tiny_finetuned):
    from minisci.serve import cli

    (tmp_path / "params.yaml").write_text(
        "finetune_ner:\n  datasets: [bc5cdr]\nfinetune_classification:\n  datasets: []\n"
    )
    monkeypatch.chdir(tmp_path)
    assert cli.build_parser().parse_args(["demo"]).cite is None
    at = app(monkeypatch, ner=tiny_finetuned["ner"])
    assert not at.exception and not at.error
    assert at.info[0].value == (  # the citation tab's, before the search tab's "No index yet"
        "No citation intent model (none: finetune_classification.datasets is empty in params.yaml); "
        "start the demo with --cite DIR for one."
    )
    assert submit(at, 0, SENTENCE) == "" and at.table  # the NER tab works as ever


def test_page_says_why_no_reviewer_is_ranked(monkeypatch, tiny_model_dir, index_dir):
    at = app(monkeypatch, embeddings=tiny_model_dir, index=index_dir)
    at.text_area[2].input("shortest paths in sparse graphs")
    at.text_area[3].input("ada\nBOB\ncy\nDee")
    at.button[3].click()
    at = at.run()
    assert not at.exception and not at.error
    assert [w.value for w in at.warning] == ["Every author in the index is excluded."]
    at.text_area[3].input("Bob")
    at = at.button[3].click().run()
    assert not at.warning and [r["author"] for r in at.table[0].value.to_dict("records")] == ["Dee", "Ada", "Cy"]


def test_page_says_there_is_no_index_when_asked_to_search_or_recommend(monkeypatch, tiny_model_dir):
    at = app(monkeypatch, embeddings=tiny_model_dir)
    at.text_input[0].input("aspirin")
    at = at.button[2].click().run()
    assert not at.exception and any("No index yet" in w.value for w in at.warning)
    at.text_area[2].input("shortest paths in sparse graphs")
    at = at.button[3].click().run()
    warnings = [w.value for w in at.warning]
    assert not at.exception and any("No index yet" in w and "Semantic search tab" in w for w in warnings), warnings


class Upload:
    """What ``st.file_uploader`` returns for a file a person chose."""

    name = "broken.jsonl"

    def getvalue(self) -> bytes:
        return b'{"id": "x"}\n'  # no title, no text


def test_a_failed_upload_keeps_the_servers_own_index(monkeypatch, tiny_model_dir, index_dir):
    import streamlit

    monkeypatch.setattr(streamlit, "file_uploader", lambda *a, **k: Upload())
    at = app(monkeypatch, embeddings=tiny_model_dir, index=index_dir)
    assert not at.exception and "broken.jsonl:1: expected an 'id'" in at.error[0].value
    at.text_input[0].input("Lung cancer lung cancer treatment with cisplatin")
    at = at.button[2].click().run()
    assert not at.exception and at.table[0].value.to_dict("records")[0]["id"] == "p2"


def test_entity_table_shows_the_input_text_not_the_lower_cased_pieces():
    text = "Huntington disease and HD."
    entities = [{"entity_group": "Disease", "score": 0.9, "word": "huntington disease", "start": 0, "end": 18}]
    assert demo.entity_rows(text, entities)[0]["text"] == "Huntington disease"


def test_messages_use_the_right_article():
    with pytest.raises(MinisciError, match="^Type or paste an abstract first.$"):
        demo.page_text("  ", "abstract")
    with pytest.raises(MinisciError, match="^Type or paste a query first.$"):
        demo.page_text("", "query")


# 2. the page in a real browser


def browser() -> tuple[str, str]:
    """Chromium and chromedriver, or a skip that says what is missing."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -r requirements.txt)")
    chrome = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = shutil.which("chromedriver")
    if not chrome or not driver:
        pytest.skip(
            "no headless browser: install Debian's chromium and chromium-driver (.ci/run does, where apt works)"
        )
    return chrome, driver


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def demo_url(tiny_finetuned, tiny_model_dir, index_dir, tmp_path):
    """``minisci demo`` on the tiny models, in its own process group, stopped (with Streamlit) afterwards."""
    port = free_port()
    cmd = [sys.executable, "-m", "minisci.serve.cli", "demo", "--port", str(port)]
    cmd += ["--ner", str(tiny_finetuned["ner"]), "--cite", str(tiny_finetuned["cite"])]
    cmd += ["--embeddings", str(tiny_model_dir), "--index", str(index_dir)]
    log = (tmp_path / "demo.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 40
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"minisci demo did not start:\n{(tmp_path / 'demo.log').read_text()}")
            time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_page_in_a_real_browser(demo_url, tmp_path):
    chrome, chromedriver = browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    shots = Path(os.environ.get("MINISCI_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1200,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    wait = WebDriverWait(driver, 40)

    def button(label: str):
        return wait.until(ec.element_to_be_clickable((By.XPATH, f"//button[normalize-space(.)='{label}']")))

    try:
        # 1. NER: type a sentence, tag it, see the drugs highlighted with type and score on hover
        driver.get(demo_url)
        area = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "textarea[aria-label='Biomedical text']")))
        area.send_keys(SENTENCE)
        button("Tag entities").click()
        marks = wait.until(ec.presence_of_all_elements_located((By.CSS_SELECTOR, "mark.minisci-entity")))
        words = {m.text.split("\n")[0].replace("Entity", "").strip() for m in marks}
        assert {"aspirin", "heparin"} <= words
        assert marks[0].get_attribute("title").startswith("Entity · score 0.")
        wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "[data-testid='stTable'] tbody tr")))
        driver.save_screenshot(str(shots / "demo_ner.png"))

        # 2. search: the query that is p2's own text ranks p2 first
        driver.find_element(By.XPATH, "//*[@role='tab'][normalize-space(.)='Semantic search']").click()
        query = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "input[aria-label='Query']")))
        query.send_keys("Lung cancer lung cancer treatment with cisplatin")
        button("Search").click()
        rows = wait.until(ec.visibility_of_all_elements_located((By.CSS_SELECTOR, "[data-testid='stTable'] tbody tr")))
        cells = [[td.text for td in r.find_elements(By.CSS_SELECTOR, "td")] for r in rows]
        assert [c[0] for c in cells] == ["1", "2", "3"] and cells[0][2] == "p2" and cells[0][1] == "1.0000"
        driver.save_screenshot(str(shots / "demo_search.png"))
    finally:
        driver.quit()


# 3. stopping `minisci demo` stops its server


def start_demo(tmp_path, tiny_finetuned, tiny_model_dir, index_dir):
    """``minisci demo`` and its Streamlit child, once the page answers."""
    import psutil

    port = free_port()
    cmd = [sys.executable, "-m", "minisci.serve.cli", "demo", "--port", str(port)]
    cmd += ["--ner", str(tiny_finetuned["ner"]), "--cite", str(tiny_finetuned["cite"])]
    cmd += ["--embeddings", str(tiny_model_dir), "--index", str(index_dir)]
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"minisci demo did not start:\n{log.read_text()}")
        time.sleep(0.3)
    (server,) = psutil.Process(proc.pid).children()
    return proc, server, port


def port_is_free(port: int) -> bool:
    """Could a new server listen on ``port`` (connections of the old one in TIME_WAIT do not count)?"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_stopping_the_demo_by_its_pid_stops_streamlit(sig, tmp_path, tiny_finetuned, tiny_model_dir, index_dir):
    """``kill PID`` of ``minisci demo`` alone (not its process group, as a terminal's Ctrl+C would)."""
    import psutil

    proc, server, port = start_demo(tmp_path, tiny_finetuned, tiny_model_dir, index_dir)
    try:
        os.kill(proc.pid, sig)
        code = proc.wait(timeout=30)
        assert code == (-9 if sig == signal.SIGKILL else 0), (tmp_path / "demo.log").read_text()
        psutil.wait_procs([server], timeout=30)
        assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
        deadline = time.monotonic() + 10
        while not port_is_free(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert port_is_free(port)
    finally:
        if server.is_running():
            server.kill()
        if proc.poll() is None:
            proc.kill()
