#!/usr/bin/env python3
"""The GUI flow of test_gui_runs.py on machine-local's image `local` as an ordinary user
(issue 21: agent hosts run as their user): run by root, this file runs itself again as relayci
(rootless_support.py); run by an ordinary user, as that user. An X application and a browser
(chromium --no-sandbox) are opened in step 1, driven with xdotool in step 2, the after-images
show it, the package verifies."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Skip, run_tests  # noqa: E402
from rootless_support import as_ordinary_user  # noqa: E402

os.environ["RELAY_RUNS_VARIANTS"] = "local"
import test_gui_runs  # noqa: E402


def ordinary():
    if os.geteuid() == 0:
        raise Skip("runs as an ordinary user only (the root parent reruns it as one)")


def test_x_application_as_user(binary):
    ordinary()
    test_gui_runs.test_x_application_stays_open_and_is_driven(binary)


def test_browser_as_user(binary):
    ordinary()
    test_gui_runs.test_browser_page_is_clicked(binary)


if __name__ == "__main__":
    as_ordinary_user(__file__)
    run_tests(globals())
