"""The left-hand tree: Host → CPU, GPUs by vendor, toolchains, Python, ceilings, checks."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from tracea.doctor.report import HostReport

from .model import HOST, NodeSpec, tree_spec


class DeviceTree(Tree[str]):
    """A tree whose node data is the model's node key (``cpu``, ``nvidia:0``, ...)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("Host", data=HOST, id=id)
        self._by_key: dict[str, TreeNode[str]] = {}
        self.show_root = True
        self.guide_depth = 3

    def show(self, report: HostReport, cursor_key: str | None = None) -> None:
        """Rebuild from ``report``; the cursor goes back to ``cursor_key`` where that node still exists."""
        spec = tree_spec(report)
        self.clear()
        self.root.set_label(Text(spec.label))  # Text, not str: a str label is parsed as markup
        self.root.data = spec.key
        self._by_key = {spec.key: self.root}
        self._add(self.root, spec.children)
        self.root.expand_all()
        target = self._by_key.get(cursor_key or HOST, self.root)
        # Lines (and so a node's cursor position) are only laid out on the next refresh.
        self.call_after_refresh(self.move_cursor, target)

    def _add(self, parent: TreeNode[str], children: tuple[NodeSpec, ...]) -> None:
        for child in children:
            if child.children:
                node = parent.add(Text(child.label), data=child.key, expand=True)
            else:
                node = parent.add_leaf(Text(child.label), data=child.key)
            self._by_key[child.key] = node  # before the children: keys come out in tree order
            self._add(node, child.children)

    def node_for(self, key: str) -> TreeNode[str] | None:
        return self._by_key.get(key)

    @property
    def keys(self) -> list[str]:
        return list(self._by_key)

    @property
    def cursor_key(self) -> str | None:
        node = self.cursor_node
        return node.data if node is not None else None
