package cart

func TestTotal() {}
