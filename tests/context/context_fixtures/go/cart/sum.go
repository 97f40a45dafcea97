package cart

// Sum adds the items up using Total.
func Sum(items []Item) int {
	return Total(items)
}
