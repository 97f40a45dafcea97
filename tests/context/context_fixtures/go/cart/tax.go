package cart

const Rate = 20
