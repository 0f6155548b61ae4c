"""The Flex Template's entry file (FLEX_TEMPLATE_PYTHON_PY_FILE in the Dockerfile).

Only a caller: the launch is fleet_goodput/runs/launcher.py, in the installed
package. Run as a file, a module's folder goes first on sys.path, so this
file sits in a folder with no Python module beside it to shadow another.
"""

from fleet_goodput.runs.launcher import main

if __name__ == "__main__":
    main()
