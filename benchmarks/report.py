"""What every benchmark script does with its report: print the markdown, and with ``--out``
write it there and the raw figures as JSON beside it (same name, ``.json``)."""
from __future__ import annotations

import json
import os


def write_report(text: str, out: str | None, data) -> None:
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
        with open(os.path.splitext(out)[0] + ".json", "w") as f:
            json.dump(data, f, indent=1, default=str)
