import pytest

pytest.importorskip("gymnasium", reason="control recipes need the extra polo[control]")
