package main

import (
	"fmt"
	c "example.com/shop/cart"
)

func main() {
	fmt.Println(c.Total(nil))
}
