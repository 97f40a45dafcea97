package com.example.warehouse;

import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.UUID;

/**
 * Tracks stock levels per SKU and lets callers reserve items for an order
 * before committing or releasing them. Reservations expire automatically.
 */
public class Inventory {

    /** Base class for all inventory failures. */
    public static class InventoryException extends Exception {
        private static final long serialVersionUID = 1L;

        public InventoryException(String message) {
            super(message);
        }
    }

    public static class UnknownSkuException extends InventoryException {
        private static final long serialVersionUID = 1L;

        public UnknownSkuException(String sku) {
            super("unknown SKU: " + sku);
        }
    }

    public static class InsufficientStockException extends InventoryException {
        private static final long serialVersionUID = 1L;

        public InsufficientStockException(String sku, int requested, int available) {
            super(String.format("cannot reserve %d x %s, only %d available", requested, sku, available));
        }
    }

    /** Mutable stock record for one SKU. */
    private static final class StockItem {
        final String sku;
        final String description;
        int onHand;
        int reserved;
        int reorderLevel;

        StockItem(String sku, String description, int onHand, int reorderLevel) {
            this.sku = sku;
            this.description = description;
            this.onHand = onHand;
            this.reorderLevel = reorderLevel;
        }

        int available() {
            return onHand - reserved;
        }
    }

    /** A hold on some quantity of stock for a single order line. */
    public record Reservation(String id, String sku, int quantity, Instant expiresAt) {
        public Reservation {
            Objects.requireNonNull(id, "id");
            Objects.requireNonNull(sku, "sku");
            if (quantity <= 0) {
                throw new IllegalArgumentException("quantity must be positive");
            }
        }

        boolean isExpired(Instant now) {
            return !now.isBefore(expiresAt);
        }
    }

    private final Map<String, StockItem> items = new HashMap<>();
    private final Map<String, Reservation> reservations = new HashMap<>();
    private final Duration holdTime;
    private final Clock clock;

    public Inventory(Duration holdTime, Clock clock) {
        if (holdTime.isNegative() || holdTime.isZero()) {
            throw new IllegalArgumentException("holdTime must be positive");
        }
        this.holdTime = holdTime;
        this.clock = clock;
    }

    public Inventory() {
        this(Duration.ofMinutes(15), Clock.systemUTC());
    }

    public synchronized void addProduct(String sku, String description, int initialStock, int reorderLevel) {
        if (sku == null || sku.isBlank()) {
            throw new IllegalArgumentException("sku must not be blank");
        }
        if (initialStock < 0 || reorderLevel < 0) {
            throw new IllegalArgumentException("stock levels must not be negative");
        }
        if (items.containsKey(sku)) {
            throw new IllegalStateException("product already exists: " + sku);
        }
        items.put(sku, new StockItem(sku, description, initialStock, reorderLevel));
    }

    public synchronized void receive(String sku, int quantity) throws UnknownSkuException {
        if (quantity <= 0) {
            throw new IllegalArgumentException("received quantity must be positive");
        }
        find(sku).onHand += quantity;
    }

    public synchronized int available(String sku) throws UnknownSkuException {
        expireReservations();
        return find(sku).available();
    }

    public synchronized Reservation reserve(String sku, int quantity) throws InventoryException {
        expireReservations();
        StockItem item = find(sku);
        if (quantity > item.available()) {
            throw new InsufficientStockException(sku, quantity, item.available());
        }
        Reservation reservation = new Reservation(
                UUID.randomUUID().toString(), sku, quantity, clock.instant().plus(holdTime));
        item.reserved += quantity;
        reservations.put(reservation.id(), reservation);
        return reservation;
    }

    /** Turn a reservation into a shipment: the stock leaves the warehouse. */
    public synchronized void commit(String reservationId) throws InventoryException {
        expireReservations();
        Reservation reservation = reservations.remove(reservationId);
        if (reservation == null) {
            throw new InventoryException("reservation not found or expired: " + reservationId);
        }
        StockItem item = find(reservation.sku());
        item.reserved -= reservation.quantity();
        item.onHand -= reservation.quantity();
    }

    /** Give reserved stock back; returns false if it had already expired. */
    public synchronized boolean release(String reservationId) throws UnknownSkuException {
        Reservation reservation = reservations.remove(reservationId);
        if (reservation == null) {
            return false;
        }
        find(reservation.sku()).reserved -= reservation.quantity();
        return true;
    }

    public synchronized Optional<String> describe(String sku) {
        StockItem item = items.get(sku);
        if (item == null) {
            return Optional.empty();
        }
        return Optional.of(String.format("%s (%s): %d on hand, %d reserved",
                item.sku, item.description, item.onHand, item.reserved));
    }

    /** SKUs whose available stock has dropped to or below the reorder level. */
    public synchronized List<String> needsReorder() {
        expireReservations();
        List<String> result = new ArrayList<>();
        for (StockItem item : items.values()) {
            if (item.available() <= item.reorderLevel) {
                result.add(item.sku);
            }
        }
        Collections.sort(result);
        return result;
    }

    private StockItem find(String sku) throws UnknownSkuException {
        StockItem item = items.get(sku);
        if (item == null) {
            throw new UnknownSkuException(sku);
        }
        return item;
    }

    private void expireReservations() {
        Instant now = clock.instant();
        Iterator<Reservation> it = reservations.values().iterator();
        while (it.hasNext()) {
            Reservation reservation = it.next();
            if (reservation.isExpired(now)) {
                StockItem item = items.get(reservation.sku());
                if (item != null) {
                    item.reserved -= reservation.quantity();
                }
                it.remove();
            }
        }
    }

    public static void main(String[] args) throws InventoryException {
        Inventory inventory = new Inventory();
        inventory.addProduct("BOLT-M6", "Hex bolt M6x20", 500, 100);
        inventory.addProduct("NUT-M6", "Hex nut M6", 80, 100);
        Reservation bolts = inventory.reserve("BOLT-M6", 420);
        inventory.commit(bolts.id());
        try {
            inventory.reserve("NUT-M6", 120);
        } catch (InsufficientStockException e) {
            System.out.println("rejected: " + e.getMessage());
        }
        inventory.describe("BOLT-M6").ifPresent(System.out::println);
        System.out.println("reorder: " + inventory.needsReorder());
    }
}
