// order_book.cpp - a price-time priority limit order book for one instrument.
//
// Prices are integer ticks and quantities integer lots, so matching is exact.
// Incoming orders match against the opposite side; any remainder of a limit
// order rests on the book, while market orders never rest.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace exchange {

enum class Side { Buy, Sell };
enum class OrderType { Limit, Market };

using OrderId = std::uint64_t;
using Price = std::int64_t;
using Quantity = std::int64_t;

struct Order {
    OrderId id;
    std::string trader;
    Side side;
    OrderType type;
    Price price;  // ignored for market orders
    Quantity remaining;
};

struct Trade {
    OrderId buy_id;
    OrderId sell_id;
    Price price;
    Quantity quantity;
};

class OrderError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class OrderBook {
public:
    using TradeListener = std::function<void(const Trade&)>;

    void on_trade(TradeListener listener) { listeners_.push_back(std::move(listener)); }

    // Submit a new order and return the trades it produced.
    std::vector<Trade> submit(const std::string& trader, Side side, OrderType type, Price price,
                              Quantity quantity) {
        if (quantity <= 0) {
            throw OrderError("quantity must be positive");
        }
        if (type == OrderType::Limit && price <= 0) {
            throw OrderError("limit price must be positive");
        }
        Order order{next_id_++, trader, side, type, price, quantity};
        std::vector<Trade> trades = side == Side::Buy ? match(order, asks_) : match(order, bids_);
        if (order.remaining > 0 && type == OrderType::Limit) {
            rest(order);
        }
        for (const auto& trade : trades) {
            for (const auto& listener : listeners_) {
                listener(trade);
            }
        }
        return trades;
    }

    // Cancel a resting order; returns false if it is unknown or already filled.
    bool cancel(OrderId id) {
        auto found = index_.find(id);
        if (found == index_.end()) {
            return false;
        }
        const auto [side, price] = found->second;
        auto erase_from = [&](auto& book) {
            auto level = book.find(price);
            if (level == book.end()) {
                return false;
            }
            auto& queue = level->second;
            for (auto it = queue.begin(); it != queue.end(); ++it) {
                if (it->id == id) {
                    queue.erase(it);
                    if (queue.empty()) {
                        book.erase(level);
                    }
                    return true;
                }
            }
            return false;
        };
        const bool erased = side == Side::Buy ? erase_from(bids_) : erase_from(asks_);
        index_.erase(found);
        return erased;
    }

    Price best_bid() const { return bids_.empty() ? 0 : bids_.begin()->first; }
    Price best_ask() const { return asks_.empty() ? 0 : asks_.begin()->first; }

    Quantity depth_at(Side side, Price price) const {
        Quantity total = 0;
        auto sum = [&](const auto& book) {
            auto level = book.find(price);
            if (level != book.end()) {
                for (const auto& order : level->second) {
                    total += order.remaining;
                }
            }
        };
        side == Side::Buy ? sum(bids_) : sum(asks_);
        return total;
    }

    void print(std::ostream& os, int levels = 5) const {
        os << "   price | bid qty | ask qty\n";
        std::vector<std::pair<Price, Quantity>> ask_rows;
        for (const auto& [price, queue] : asks_) {
            if (static_cast<int>(ask_rows.size()) >= levels) break;
            ask_rows.emplace_back(price, level_total(queue));
        }
        for (auto it = ask_rows.rbegin(); it != ask_rows.rend(); ++it) {
            os << std::setw(8) << it->first << " | " << std::setw(7) << "" << " | "
               << std::setw(7) << it->second << '\n';
        }
        int shown = 0;
        for (const auto& [price, queue] : bids_) {
            if (shown++ >= levels) break;
            os << std::setw(8) << price << " | " << std::setw(7) << level_total(queue) << " |\n";
        }
    }

private:
    using Level = std::deque<Order>;

    static Quantity level_total(const Level& level) {
        Quantity total = 0;
        for (const auto& order : level) {
            total += order.remaining;
        }
        return total;
    }

    static bool crosses(const Order& incoming, Price resting_price) {
        if (incoming.type == OrderType::Market) {
            return true;
        }
        return incoming.side == Side::Buy ? incoming.price >= resting_price
                                          : incoming.price <= resting_price;
    }

    // Works for both sides: the book's comparator puts the best price first.
    template <typename Book>
    std::vector<Trade> match(Order& incoming, Book& book) {
        std::vector<Trade> trades;
        while (incoming.remaining > 0 && !book.empty()) {
            auto level = book.begin();
            if (!crosses(incoming, level->first)) {
                break;
            }
            Level& queue = level->second;
            while (incoming.remaining > 0 && !queue.empty()) {
                Order& resting = queue.front();
                const Quantity qty = std::min(incoming.remaining, resting.remaining);
                const bool buy = incoming.side == Side::Buy;
                trades.push_back({buy ? incoming.id : resting.id, buy ? resting.id : incoming.id,
                                  level->first, qty});
                incoming.remaining -= qty;
                resting.remaining -= qty;
                if (resting.remaining == 0) {
                    index_.erase(resting.id);
                    queue.pop_front();
                }
            }
            if (queue.empty()) {
                book.erase(level);
            }
        }
        return trades;
    }

    void rest(const Order& order) {
        index_[order.id] = {order.side, order.price};
        if (order.side == Side::Buy) {
            bids_[order.price].push_back(order);
        } else {
            asks_[order.price].push_back(order);
        }
    }

    std::map<Price, Level, std::greater<Price>> bids_;  // highest first
    std::map<Price, Level, std::less<Price>> asks_;     // lowest first
    std::unordered_map<OrderId, std::pair<Side, Price>> index_;
    std::vector<TradeListener> listeners_;
    OrderId next_id_ = 1;
};

}  // namespace exchange

int main() {
    using namespace exchange;
    OrderBook book;
    book.on_trade([](const Trade& t) {
        std::cout << "trade " << t.quantity << " @ " << t.price << " (buy #" << t.buy_id
                  << ", sell #" << t.sell_id << ")\n";
    });
    book.submit("alice", Side::Sell, OrderType::Limit, 10100, 50);
    book.submit("bob", Side::Sell, OrderType::Limit, 10050, 20);
    book.submit("carol", Side::Buy, OrderType::Limit, 10000, 40);
    book.submit("dave", Side::Buy, OrderType::Limit, 10100, 30);
    book.submit("erin", Side::Sell, OrderType::Market, 0, 15);
    try {
        book.submit("mallory", Side::Buy, OrderType::Limit, -5, 10);
    } catch (const OrderError& e) {
        std::cerr << "rejected: " << e.what() << '\n';
    }
    book.print(std::cout);
    std::cout << "spread: " << book.best_ask() - book.best_bid() << " ticks\n";
    return 0;
}
