"""A daemon's port file (--port_file): the address it listens on.

The daemon writes the file and ends it with a newline (common/daemon.cc,
WritePortFile); a file without its newline is not complete yet. The one
reader of that rule for the launcher (pstrain.run), the Python tests'
cluster and the benches.
"""


def read_address(path):
    """The address in the port file at `path` once it is complete, else None.

    Args:
      path: the file a daemon was started with (--port_file=PATH); a str or
        a pathlib.Path.
    """
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return text.strip() if text.endswith("\n") else None
