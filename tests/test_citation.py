"""Specifications of CITATION.cff: a citation file of the Citation File Format 1.2.0 whose repository-code is the one
address of the project's repository, which the notebooks' setup cells clone and every README link into the project
(GitHub, Colab) uses; until the project is published, the placeholder https://github.com/OWNER/REPO everywhere.

    python -m pytest -q tests/test_citation.py
"""
import glob
import json
import os
import re

from conftest import ROOT

CITATION = os.path.join(ROOT, "CITATION.cff")


def repository_code():
    """CITATION.cff's repository-code: https://github.com/OWNER/REPO."""
    return re.search(r'^repository-code: "(https://github\.com/[\w.-]+/[\w.-]+)"$', open(CITATION).read(), re.M)[1]


def test_citation_file_has_what_the_format_requires_and_cites_the_write_up():
    text = open(CITATION, encoding="utf-8").read()
    keys = re.findall(r"^([\w-]+):", text, re.M)  # the top-level keys
    assert {"cff-version", "message", "title", "authors", "license", "repository-code", "references"} <= set(keys)
    assert len(keys) == len(set(keys)) and re.search(r"^cff-version: 1\.2\.0$", text, re.M)
    assert re.search(r"^license: MIT$", text, re.M) and "MIT License" in open(os.path.join(ROOT, "LICENSE")).read()
    assert 'title: "Auto-regressive Encoder-Decoder Transformer"' in text and "year: 2024" in text
    assert repository_code()


def test_notebooks_clone_the_repository_of_the_citation_file():
    urls = {}
    for path in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")):
        code = "".join("".join(cell["source"]) for cell in json.load(open(path, encoding="utf-8"))["cells"]
                       if cell["cell_type"] == "code")
        urls.update({os.path.basename(path): url for url in re.findall(r'^REPO_URL = "([^"]*)"', code, re.M)})
    assert urls and set(urls.values()) == {repository_code()}, urls


def test_readme_links_into_the_project_use_the_repository_of_the_citation_file():
    """A Colab link, or a GitHub link to a file the project has, names the repository; links to other projects (the
    write-up's, nanoGPT) may name theirs. Each linked file exists."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    owner_repo = repository_code().removeprefix("https://github.com/")
    colab = re.findall(r"https://colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/[\w.-]+/([^\s)>\]]+)",
                       readme)
    github = [(repo, path) for repo, path in re.findall(
        r"https://github\.com/([\w.-]+/[\w.-]+)/(?:blob|tree)/[\w.-]+/([^\s)>\]#]+)", readme)
        if os.path.exists(os.path.join(ROOT, path)) or repo == owner_repo]
    for repo, path in colab + github:
        assert repo == owner_repo and os.path.exists(os.path.join(ROOT, path)), (repo, path)
