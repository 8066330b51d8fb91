"""mkdocs hook: the site mirrors the repository's paths.

The manual lives in docs/, but its pages link to Markdown files elsewhere in the repository
(README.md, bench/README.md, ...) with the relative links that work on GitHub. This hook gives
every page its repository path (docs/cli.md stays docs/cli.md; README.md becomes the home page)
and adds the repository pages listed in REPO_PAGES, so those links resolve on the site too and
mkdocs' strict build checks them. A relative link to anything else in the repository (a source
file, a folder) is checked here: it must exist, and is rendered as its path in code, since the
site does not carry the sources. A link to a path that does not exist is left for mkdocs to
report, which fails the strict build.
"""

import glob
import os
import re

from mkdocs.structure.files import File, Files

REPO_PAGES = [
    "README.md",
    "CONTRIBUTING.md",
    "SECURITY.md",
    "CHANGELOG.md",
    "bench/README.md",
    "bench/results/*.md",
    "bench/results/*.png",
    "qnn-sys/README.md",
    "qnnx-py/README.md",
    "tests/README.md",
]

_LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


def _repo(config):
    return os.path.dirname(os.path.abspath(config.config_file_path))


def on_files(files, config):
    repo = _repo(config)
    docs_dir = os.path.abspath(config.docs_dir)
    out = Files([])
    for f in files:
        if os.path.abspath(f.src_dir) == docs_dir:
            rel = "docs/" + f.src_uri
            out.append(File(rel, repo, config.site_dir, config.use_directory_urls))
        else:
            out.append(f)
    for pattern in REPO_PAGES:
        for path in sorted(glob.glob(os.path.join(repo, pattern))):
            rel = os.path.relpath(path, repo).replace(os.sep, "/")
            out.append(File(rel, repo, config.site_dir, config.use_directory_urls))
    return out


def on_page_markdown(markdown, page, config, files):
    repo = _repo(config)
    here = os.path.dirname(page.file.src_uri)
    site_paths = {f.src_uri for f in files}
    out, fence = [], False
    for line in markdown.split("\n"):
        if _FENCE.match(line.lstrip()):
            fence = not fence
        if not fence:
            line = _LINK.sub(lambda m: _rewrite(m, here, repo, site_paths), line)
        out.append(line)
    return "\n".join(out)


def _rewrite(m, here, repo, site_paths):
    text, target = m.group(1), m.group(2)
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return m.group(0)
    path = target.split("#", 1)[0]
    rel = os.path.normpath(os.path.join(here, path)).replace(os.sep, "/")
    if rel in site_paths or rel.startswith(".."):
        return m.group(0)
    if os.path.exists(os.path.join(repo, rel)):
        # In the repository, not on the site: the path as text (GitHub keeps the link).
        return text if text.startswith("`") else f"{text} (`{rel}`)" if text != rel else f"`{rel}`"
    return m.group(0)
