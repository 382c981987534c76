"""A small inventory module: the sample file edited by `adapld demo`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Item:
    """One stock line: a product, its unit price and how many are on hand."""

    sku: str
    name: str
    unit_price: float
    quantity: int = 0
    tags: list[str] = field(default_factory=list)

    def total_value(self) -> float:
        """Value of this line at its unit price."""
        return self.unit_price * self.quantity


class Inventory:
    """A collection of items indexed by SKU."""

    def __init__(self) -> None:
        self.items: dict[str, Item] = {}

    def add(self, item: Item) -> None:
        if item.sku in self.items:
            self.items[item.sku].quantity += item.quantity
        else:
            self.items[item.sku] = item

    def remove(self, sku: str, quantity: int) -> None:
        item = self.items[sku]
        if quantity > item.quantity:
            raise ValueError(f"only {item.quantity} of {sku} in stock")
        item.quantity -= quantity
        if item.quantity == 0:
            del self.items[sku]

    def total_value(self) -> float:
        """Value of the whole inventory."""
        return sum(item.total_value() for item in self.items.values())

    def low_stock(self, threshold: int = 5) -> list[Item]:
        """Items with fewer than `threshold` units, lowest first."""
        low = [item for item in self.items.values() if item.quantity < threshold]
        return sorted(low, key=lambda item: item.quantity)

    def tagged(self, tag: str) -> list[Item]:
        return [item for item in self.items.values() if tag in item.tags]


def report(inventory: Inventory) -> str:
    lines = [f"{len(inventory.items)} products, worth {inventory.total_value():.2f}"]
    for item in inventory.low_stock():
        lines.append(f"  low: {item.name} ({item.quantity} left)")
    return "\n".join(lines)


if __name__ == "__main__":
    stock = Inventory()
    stock.add(Item("A-1", "bolt", 0.25, 120, ["hardware"]))
    stock.add(Item("B-7", "hinge", 3.10, 4, ["hardware", "doors"]))
    stock.add(Item("C-3", "lamp", 18.00, 2))
    print(report(stock))
